"""Fixtures for the verl backend tests: a reporter the agent loop reports to, the scripted tool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scripted_loop import BonusTool

from trainer.backends.verl import agent_loop
from trainer.report.reporters import MemoryReporter
from trainer.tools import TOOLS


@pytest.fixture
def reporter() -> Iterator[MemoryReporter]:
    memory = MemoryReporter()
    agent_loop.set_reporter(memory)
    yield memory
    agent_loop.set_reporter(None)


@pytest.fixture
def bonus_tool(temp_register: Any) -> None:
    temp_register(TOOLS, "bonus", BonusTool)
