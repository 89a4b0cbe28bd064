"""What a recipe tells the demonstration generator (docs/demonstrations.md#rules): for one row, the
tool calls to make in order and how to write the final answer from their results.

A recipe's rule is ``fn(row) -> Plan | None`` (None: the rule has nothing for this row, e.g. a row
without the fields it reads). The generator runs the calls against the real tools through the row's
own ToolEnv and keeps the demonstration only when the task's reward scores the answer right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class PlannedCall:
    """One tool call of a demonstration: a recipe tool's name and its arguments."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """The calls, one per assistant turn, then ``answer(results)``: the final reply written from the
    calls' result texts, or None when they do not give the answer (the row is dropped)."""

    calls: Sequence[PlannedCall]
    answer: Callable[[Sequence[str]], str | None]


DemoRule = Callable[[Row], "Plan | None"]


def extra_info(row: Row) -> Mapping[str, Any]:
    return row.get("extra_info") or {}


def answer_with_last_result(results: Sequence[str]) -> str | None:
    """``Answer: <the last call's result>``: the arithmetic and lookup tasks' final reply."""
    return f"Answer: {results[-1].strip()}" if results else None
