"""Loaded into the real-servers tier's Celery workers (``celery worker --include``): each step of the
reaper (services.reconcile of one run) takes SLOW_S longer, as on a slow cluster, so that a pass
outlasts the beat's tick; and each notes, in STUDIO_TEST_REAPER_METER's folder, whether another step
was in progress meanwhile, in any process of any worker.

Not a test module and not product code: the tier's reaper test reads ``steps.log``, one line per
step: the worker's pid and how many other steps were in progress when it began.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from webapp.experiments import services

METER = os.environ.get("STUDIO_TEST_REAPER_METER", "")
STEPS_LOG = "steps.log"
SLOW_S = 1.2  # the tier's beat ticks every second
_reconcile = services.reconcile


def _metered_reconcile(run: Any) -> None:
    folder = Path(METER)
    mark = folder / f"{os.getpid()}-{uuid.uuid4().hex}.in"
    mark.touch()
    try:
        others = sum(1 for path in folder.glob("*.in") if path != mark and _alive(path))
        with (folder / STEPS_LOG).open("a") as log:
            log.write(f"{os.getppid()} {others}\n")  # a prefork pool process: its parent is the worker
        time.sleep(SLOW_S)
        _reconcile(run)
    finally:
        mark.unlink()


def _alive(mark: Path) -> bool:
    """A step of a worker killed meanwhile (the tier kills one) left its mark: it is over, though
    its process may linger a moment as a zombie."""
    try:
        return psutil.Process(int(mark.name.split("-", 1)[0])).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


if METER:  # the tier's workers; the test process imports STEPS_LOG only
    services.reconcile = _metered_reconcile
