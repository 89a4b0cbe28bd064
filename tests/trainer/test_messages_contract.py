"""The chat-messages contract of demonstrations (docs/sft.md#demonstrations)."""

from __future__ import annotations

import pytest

from trainer.contract import conversation_problems, is_messages_layout, tool_schemas_of

CALL = '<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>'
GOOD = [
    {"role": "system", "content": "Answer with the lookup tool."},
    {"role": "user", "content": "What is k1?"},
    {"role": "assistant", "content": CALL},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "<answer>42</answer>"},
]


def test_a_conversation_with_a_call_and_its_result_is_accepted() -> None:
    assert conversation_problems(GOOD) == []


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ("hello", "must be a list"),
        ([], "holds no messages"),
        ([{"role": "user", "content": "hi"}], "holds no assistant message"),
        ([{"role": "robot", "content": "hi"}], "role 'robot'"),
        ([{"role": "assistant", "content": 3}], "no text content"),
        (GOOD[:4], "ends with a tool message"),
        ([GOOD[1], GOOD[3], GOOD[4]], "follows no assistant tool call"),
    ],
)
def test_it_names_what_is_wrong_with_a_conversation(messages: object, expected: str) -> None:
    assert any(expected in problem for problem in conversation_problems(messages))


def test_a_file_with_a_prompt_column_is_rl_rows_not_demonstrations() -> None:
    assert is_messages_layout(["messages", "tools"])
    assert not is_messages_layout(["messages", "prompt", "data_source"])


def test_tools_may_be_a_list_or_its_json() -> None:
    schema = {"name": "lookup", "parameters": {"type": "object"}}
    assert tool_schemas_of([schema]) == tool_schemas_of(
        '[{"name": "lookup", "parameters": {"type": "object"}}]'
    )
    assert tool_schemas_of(None) == []
    with pytest.raises(ValueError):
        tool_schemas_of('{"name": "x"}')
