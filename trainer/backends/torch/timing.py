"""Timers around the phases of a torch training step (docs/health.md#time-breakdown)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, MutableMapping


@contextlib.contextmanager
def timed(metrics: MutableMapping[str, float], key: str) -> Iterator[None]:
    """Add the block's wall time to ``metrics[key]`` (a phase that runs twice in a step adds up)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        metrics[key] = metrics.get(key, 0.0) + time.perf_counter() - started
