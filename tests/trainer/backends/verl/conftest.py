"""Fixtures for the verl backend tests: a reporter the agent loop reports to, the scripted tool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scripted_loop import BonusTool

from trainer.backends.verl import worker
from trainer.report.reporters import MemoryReporter
from trainer.tools import TOOLS


@pytest.fixture
def reporter() -> Iterator[MemoryReporter]:
    memory = MemoryReporter()
    worker.set_reporter(memory)
    yield memory
    worker.set_reporter(None)


@pytest.fixture
def bonus_tool(temp_register: Any) -> None:
    temp_register(TOOLS, "bonus", BonusTool)
