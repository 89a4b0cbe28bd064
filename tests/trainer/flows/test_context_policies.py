from __future__ import annotations

import pytest

from trainer.flows import CONTEXT_POLICIES

SYSTEM = {"role": "system", "content": "sys"}
TASK = {"role": "user", "content": "task"}


def turns(count: int) -> list[dict[str, str]]:
    messages = []
    for index in range(count):
        messages += [
            {"role": "assistant", "content": f"call {index}"},
            {"role": "user", "content": f"result {index}"},
        ]
    return messages


def test_append_keeps_the_whole_history() -> None:
    history = [SYSTEM, TASK, *turns(3)]
    assert CONTEXT_POLICIES.get("append")(history, 1) == history


def test_sliding_window_keeps_system_task_and_the_last_turns() -> None:
    history = [SYSTEM, TASK, *turns(4)]
    assert CONTEXT_POLICIES.get("sliding_window")(history, 2) == [SYSTEM, TASK, *turns(4)[4:]]


def test_sliding_window_keeps_everything_while_the_history_fits() -> None:
    history = [SYSTEM, TASK, *turns(2)]
    assert CONTEXT_POLICIES.get("sliding_window")(history, 2) == history


def test_sliding_window_works_without_a_system_message() -> None:
    history = [TASK, *turns(3)]
    assert CONTEXT_POLICIES.get("sliding_window")(history, 1) == [TASK, *turns(3)[4:]]


def test_sliding_window_rejects_an_empty_window() -> None:
    with pytest.raises(ValueError, match="window must be at least 1"):
        CONTEXT_POLICIES.get("sliding_window")([SYSTEM, TASK], 0)
