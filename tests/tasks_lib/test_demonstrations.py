"""Generated demonstrations: each recipe's rule run against the real tools, only right answers kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks_lib import demonstrations
from tasks_lib.demonstrations import NO_ANSWER, TOOL_FAILED, WRONG_ANSWER, generate, write
from tests.tasks_lib.helpers import read_rows
from trainer.contract.messages import MESSAGES_KEY, conversation_problems, tool_schemas_of
from trainer.tools import FORMATS

Prepared = Callable[..., dict[str, Path]]


@pytest.mark.parametrize(
    ("task", "tool"), [("arithmetic", "calculator"), ("lookup", "lookup"), ("hotpotqa", "search")]
)
def test_every_kept_conversation_calls_the_real_tool_and_ends_with_the_right_answer(
    task: str, tool: str, prepared: Prepared, tmp_path: Path
) -> None:
    rows = read_rows(prepared(task)["train"])
    outcome = generate(rows)

    assert len(outcome.conversations) + sum(outcome.dropped.values()) == len(rows)
    assert len(outcome.conversations) >= len(rows) - 1
    table = pq.read_table(write(outcome, tmp_path / "demos.parquet")).to_pylist()
    for row in table:
        messages = row[MESSAGES_KEY]
        assert conversation_problems(messages) == []
        calls = FORMATS.get("hermes").parse(messages[2]["content"])
        assert [call.name for call in calls] == [tool] and calls[0].error is None
        assert messages[3]["role"] == "tool" and not messages[3]["content"].startswith("Error")
        assert [schema["function"]["name"] for schema in tool_schemas_of(row["tools"])] == [tool]


def test_rows_are_dropped_with_their_reason_when_the_answer_is_wrong_or_the_tool_fails(
    prepared: Prepared,
) -> None:
    rows = read_rows(prepared("lookup")["train"])[:3]
    wrong = {**rows[0], "reward_model": {"style": "rule", "ground_truth": "1"}}
    unknown_key = {**rows[1], "extra_info": {**rows[1]["extra_info"], "key": "no-such-key"}}
    outcome = generate([wrong, unknown_key, rows[2]])

    assert len(outcome.conversations) == 1
    assert outcome.dropped == {WRONG_ANSWER: 1, TOOL_FAILED: 1}
    assert "no entry for the key 'no-such-key'" in outcome.summary()["examples"][TOOL_FAILED]


def test_a_hotpotqa_row_whose_searches_miss_the_answer_is_dropped(prepared: Prepared) -> None:
    row = read_rows(prepared("hotpotqa")["train"])[0]
    unanswerable = {**row, "reward_model": {"style": "rule", "ground_truth": ["Atlantis"]}}
    assert generate([unanswerable]).dropped == {NO_ANSWER: 1}


def test_a_tool_map_runs_the_calls_on_another_tool_and_names_it(prepared: Prepared) -> None:
    rows = read_rows(prepared("arithmetic")["train"])[:2]
    # echo returns the expression itself: the answer is wrong, so nothing is kept, but the call ran on echo.
    outcome = generate(rows, tool_map={"calculator": "echo"})
    assert outcome.dropped == {TOOL_FAILED: 2}  # echo takes "text", not "expression"
    assert "echo" in outcome.examples[TOOL_FAILED]
    assert demonstrations.recipe_tools(rows) == ["calculator"]
