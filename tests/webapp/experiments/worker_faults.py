"""Loaded into a test's Celery worker (``celery worker --include``): kills the worker inside its
launch task, where STUDIO_TEST_WORKER_FAULT says, the way an OOM kill or a lost node would.

- ``die-before-start``: after the run is marked starting, before its executor is asked to start it;
- ``die-after-start``: after the executor started the trainer, before its ref is recorded.

Not a test module and not product code: the worker process really dies with SIGKILL mid-task.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from webapp.experiments.executors import LocalExecutor

FAULT = os.environ.get("STUDIO_TEST_WORKER_FAULT", "")
_start = LocalExecutor.start


def _start_then_die(self: LocalExecutor, run: Any, token: str) -> str:
    if FAULT == "die-before-start":
        os.kill(os.getpid(), signal.SIGKILL)
    ref = _start(self, run, token)
    if FAULT == "die-after-start":
        os.kill(os.getpid(), signal.SIGKILL)
    return ref


LocalExecutor.start = _start_then_die  # type: ignore[method-assign]
