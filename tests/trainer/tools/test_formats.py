from __future__ import annotations

import json

from trainer.tools import FORMATS, TOOLS

hermes = FORMATS.get("hermes")


def test_it_parses_one_hermes_call() -> None:
    calls = hermes.parse(
        'Let me check.\n<tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>'
    )
    assert [(c.name, c.arguments, c.error) for c in calls] == [("echo", {"text": "hi"}, None)]


def test_it_parses_several_calls_in_order() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> and '
        '<tool_call>{"name": "b", "arguments": {"y": [2, 3]}}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in hermes.parse(text)] == [("a", {"x": 1}), ("b", {"y": [2, 3]})]


def test_it_finds_no_call_in_a_plain_answer() -> None:
    assert hermes.parse("The answer is 42.") == []


def test_it_accepts_missing_arguments_and_json_encoded_arguments() -> None:
    text = '<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b", "arguments": "{\\"k\\": 1}"}</tool_call>'
    assert [(c.name, c.arguments, c.error) for c in hermes.parse(text)] == [
        ("a", {}, None),
        ("b", {"k": 1}, None),
    ]


def test_it_marks_malformed_json_without_raising() -> None:
    (call,) = hermes.parse('<tool_call>{"name": "echo", "arguments": {"text": </tool_call>')
    assert call.error == "malformed"
    assert call.info["reason"].startswith("invalid JSON")
    assert call.arguments == '{"name": "echo", "arguments": {"text":'
    assert call.result.startswith("Error: malformed tool call (invalid JSON")


def test_it_marks_a_call_without_a_name_as_malformed() -> None:
    (call,) = hermes.parse('<tool_call>{"arguments": {"text": "hi"}}</tool_call>')
    assert (call.error, call.info["reason"]) == ("malformed", 'missing "name"')


def test_it_marks_non_object_arguments_and_an_unclosed_block_as_malformed() -> None:
    text = '<tool_call>{"name": "echo", "arguments": [1]}</tool_call> then <tool_call>{"name": "echo"'
    calls = hermes.parse(text)
    assert [(c.name, c.error, c.info["reason"]) for c in calls] == [
        ("echo", "malformed", '"arguments" must be a JSON object'),
        ("", "malformed", "missing </tool_call>"),
    ]


def test_it_renders_all_results_in_one_user_message() -> None:
    message = hermes.render_results(["4", "Error: nope"])
    assert message == {
        "role": "user",
        "content": "<tool_response>\n4\n</tool_response>\n<tool_response>\nError: nope\n</tool_response>",
    }


def test_it_describes_tools_for_templates_without_tool_support() -> None:
    schema = TOOLS.get("echo")().schema()
    text = hermes.tools_prompt([schema])
    assert f"<tools>\n{json.dumps(schema)}\n</tools>" in text
    assert "<tool_call>" in text
