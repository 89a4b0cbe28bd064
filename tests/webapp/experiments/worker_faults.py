"""Loaded into a test's Celery worker (``celery worker --include``): kills the worker inside its
launch task, where STUDIO_TEST_WORKER_FAULT says, the way an OOM kill or a lost node would.

- ``die-before-start``: after the run is marked starting, before its executor is asked to start it;
- ``die-after-start``: after the executor started the trainer, before its ref is recorded.

With STUDIO_TEST_WORKER_FAULT_ARMED (a file's path) the fault strikes only while that file exists,
and once: the worker that removes it dies, the next launch goes through (the real-servers tier's
workers carry the fault from their start; a test arms it for one launch).

The whole worker dies, its pool processes with it: its process group is killed (a trainer it started
runs in a group of its own).

Not a test module and not product code: the worker process really dies with SIGKILL mid-task.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from webapp.experiments.executors import LocalExecutor

FAULT = os.environ.get("STUDIO_TEST_WORKER_FAULT", "")
ARMED = os.environ.get("STUDIO_TEST_WORKER_FAULT_ARMED", "")
_start = LocalExecutor.start


def _strikes() -> bool:
    if not ARMED:
        return True
    try:
        Path(ARMED).unlink()  # only one worker's unlink succeeds
    except FileNotFoundError:
        return False
    return True


def _die() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _start_then_die(self: LocalExecutor, run: Any, token: str) -> str:
    strikes = _strikes()
    if strikes and FAULT == "die-before-start":
        _die()
    ref = _start(self, run, token)
    if strikes and FAULT == "die-after-start":
        _die()
    return ref


LocalExecutor.start = _start_then_die  # type: ignore[method-assign]
