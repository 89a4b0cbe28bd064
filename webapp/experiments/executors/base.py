"""What an executor declares and does: the :class:`Executor` protocol and the ``EXECUTORS`` registry.

Shared code (launch, the team's limit, the reaper, the log tail, a run's files) asks a run's
executor, never its name, the way Django's ORM asks ``connection.features``: a new executor is one
class (docs/architecture.md#adding-an-executor-slurm-kubernetes). This module imports no model:
the models ask the declarations too (which runs the limit counts, which ones report their own
status), so they import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from django.conf import settings

from trainer.backends import BACKENDS, Job, LaunchEnv
from trainer.config import RunConfig
from trainer.contract import CLAIMANT_ENV, new_claimant_id
from trainer.registry import Registry

if TYPE_CHECKING:
    from webapp.experiments.models import Run


@dataclass(frozen=True)
class ExecutorState:
    """``alive`` while the process/job may still report; otherwise ``exit_code`` / ``message`` say how it ended."""

    alive: bool
    exit_code: int | None = None
    message: str = ""
    stopped: bool = False  # ended because someone stopped it
    pending: bool = False  # alive but not started: a Ray job still waiting for its entrypoint's resources
    started: bool = True  # False: the executor never got the run (its launch died before handing it over)
    node: str = ""  # where the run's process runs (a Ray node), when the executor knows and says


# What a started run's message starts with while its executor waits for resources (a Ray job queued).
WAITING_FOR_RESOURCES = "waiting for resources:"


class StartRefused(RuntimeError):
    """The executor will not start this run; the message says why and what to do instead. The run
    fails with this message alone (any other error starting it is prefixed with the executor)."""


class Executor(Protocol):
    """Where a run's training process lives, and how the studio reaches it."""

    name: str  # the registry name, stored in Run.executor and RunConfig.executor
    # The team's limit on active runs (docs/sweeps.md#limit) counts this executor's started runs:
    # they share this machine. A cluster that places its jobs itself (Ray) is not limited.
    limited_by_team: bool
    # The studio starts, polls and stops this executor's runs, and the reaper reconciles them.
    # False: runs reported from outside (an MLflow client, an import), whose status is what they say.
    reaped: bool

    def files_dir(self, run: Run) -> Path:
        """The folder of the run's files (checkpoints, artifacts): one its trainer can write to."""
        ...

    def planned_ref(self, run: Run) -> str:
        """The ref recorded before starting, when the executor names a start in advance; "" otherwise."""
        ...

    def start(self, run: Run, token: str) -> str:
        """Start the trainer for ``run`` with its API token; the ref that finds it again. Raises
        StartRefused when this executor does not start such a run."""
        ...

    def poll(self, run: Run) -> ExecutorState: ...
    def stop(self, run: Run, *, force: bool = False) -> None: ...
    def locate(self, run: Run) -> str:
        """The ref of a start that was never recorded, when this executor has it; "" otherwise."""
        ...

    def clean_up(self, run: Run) -> None:
        """Remove what an ended run leaves behind that nobody reads (its dataset copy, temp files)."""
        ...

    def log_tail(self, run: Run, max_bytes: int) -> str:
        """The end of what the executor kept of the run's output; "" when it keeps none or cannot be reached."""
        ...


EXECUTORS: Registry[Executor] = Registry("executor")


def executor_of(run: Run) -> Executor:
    return EXECUTORS.get(run.executor)


def names_where(declared: Callable[[Executor], bool]) -> list[str]:
    """The registered executors whose declarations pass ``declared``: what a query filters runs by
    (``executor__in=``), so the database follows the same declarations as the code."""
    return [name for name in EXECUTORS.names() if declared(EXECUTORS.get(name))]


def limited_executors() -> list[str]:
    return names_where(lambda executor: executor.limited_by_team)


def reaped_executors() -> list[str]:
    return names_where(lambda executor: executor.reaped)


def outside_executors() -> list[str]:
    """The executors of runs reported from outside (Run.is_external)."""
    return names_where(lambda executor: not executor.reaped)


def runs_folder(base: Path, run: Run) -> Path:
    return base / "runs" / str(run.pk)


# torch's OpenMP threads keep their default spin: the torch backend lowers its thread count while
# the machine is busy, which is what made spinning threads stall (docs/performance.md#cpu-threads).
TRAINER_ENV = {"PYTHONUNBUFFERED": "1"}


def launch_env(job: Job) -> dict[str, str]:
    """What every process of one start of the run gets on top of the backend's job env: a fresh
    claimant id, so a second start's processes cannot change a run the first one claimed."""
    return {**TRAINER_ENV, **job.env, CLAIMANT_ENV: new_claimant_id()}


def job_for(run: Run, token: str = "") -> Job:
    """What the run's backend says launching it takes. ``token`` is the run's fresh API token when
    launching; the stall hint and the precheck need none."""
    config = RunConfig.model_validate(run.config)
    env = LaunchEnv(
        run_id=str(run.pk),
        api_url=str(settings.PUBLIC_URL),
        token=token,
        project=run.experiment.name,
        mlflow_run_id=run.mlflow_run_id,
    )
    return BACKENDS.get(config.backend).job(config, env)
