"""What a Ray worker process of a verl run holds once, built from the job's environment
(:data:`~trainer.contract.RUN_ID_ENV`, ``STUDIO_API_URL``, ``STUDIO_RUN_TOKEN``): the run's team tools
and rewards, and the reporter its trajectories and token signals go to.

The agent loop (:mod:`.agent_loop`) and the token signals (:mod:`.signals`) of one worker share them.
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.contract import API_ENV, CLAIMANT_ENV, RUN_ID_ENV, TOKEN_ENV, RunSpecs
from trainer.report.client import RunApiClient
from trainer.report.http import HttpReporter
from trainer.report.reporters import Reporter
from trainer.team import needs_specs

if TYPE_CHECKING:
    from trainer.config import RunConfig

logger = logging.getLogger(__name__)

# -- the run's team tools and rewards --------------------------------------------------------------

_specs_lock = threading.Lock()
_specs: RunSpecs | None = None


def set_run_specs(specs: RunSpecs | None) -> None:
    """Use ``specs`` in this process (tests); None fetches them from the job's environment again."""
    global _specs
    with _specs_lock:
        _specs = specs


def run_specs(config: RunConfig) -> RunSpecs:
    """This worker's copy of the run's team tools and rewards, fetched once over the run's token when
    the config names any. A worker outside a webapp run (no run in the environment) has none."""
    global _specs
    with _specs_lock:
        if _specs is None:
            needed = needs_specs(config.rollout.tools, config.data.rewards)
            _specs = _specs_from_env() if needed else RunSpecs()
        return _specs


def _specs_from_env() -> RunSpecs:
    api, run_id, token = os.environ.get(API_ENV), os.environ.get(RUN_ID_ENV), os.environ.get(TOKEN_ENV)
    if not (api and run_id and token):
        return RunSpecs()
    with RunApiClient(api, run_id, token) as client:
        return client.fetch_specs()


# -- where trajectories go ----------------------------------------------------------------------------

_reporter_lock = threading.Lock()
_reporter: Reporter | None = None
_reporter_built = False


def set_reporter(reporter: Reporter | None) -> None:
    """Use ``reporter`` for trajectories in this process (tests); None goes back to the environment's."""
    global _reporter, _reporter_built
    with _reporter_lock:
        _reporter, _reporter_built = reporter, reporter is not None


def trajectory_reporter() -> Reporter | None:
    """This worker process's reporter: HTTP to the webapp when the job's environment names a run."""
    global _reporter, _reporter_built
    with _reporter_lock:
        if not _reporter_built:
            _reporter_built = True
            _reporter = _reporter_from_env()
        return _reporter


def _reporter_from_env() -> Reporter | None:
    api, run_id, token = os.environ.get(API_ENV), os.environ.get(RUN_ID_ENV), os.environ.get(TOKEN_ENV)
    if not (api and run_id and token):
        logger.info(
            "no %s/%s/%s in the environment: trajectories are not reported", API_ENV, RUN_ID_ENV, TOKEN_ENV
        )
        return None
    # One spool folder per process: several agent-loop workers share a node and its temp folder.
    spool = Path(tempfile.gettempdir()) / "agent-r1-studio-spool" / f"run-{run_id}-verl-{os.getpid()}"
    # The launch's claimant id, the same as the driver's claim: these workers belong to that start.
    claimant = os.environ.get(CLAIMANT_ENV, "")
    reporter = HttpReporter(api, run_id, token, claimant=claimant, spool_dir=spool, close_timeout_s=10.0)
    atexit.register(reporter.close)
    return reporter
