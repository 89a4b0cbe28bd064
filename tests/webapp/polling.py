"""Waiting for work a Celery worker does, without a deadline of our own: pytest-timeout bounds a hang."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(check: Callable[[], T], every_s: float = 0.2) -> T:
    """Call ``check`` until it returns something truthy, and return that."""
    while not (result := check()):
        time.sleep(every_s)
    return result
