from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainer.mdp import ToolCallRecord
from trainer.tools import TOOLS, BaseTool, ToolResult, run_tool_call


class AddTool(BaseTool):
    name = "add"
    description = "Add two integers."
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        bonus = ctx.get("bonus", 0)
        return ToolResult(text=str(args["a"] + args["b"] + bonus), reward=0.5, info={"bonus": bonus})


class BrokenTool(BaseTool):
    name = "broken"

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        raise RuntimeError("disk on fire")


class StuckTool(BaseTool):
    name = "stuck"

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        await asyncio.Event().wait()  # never set: only the timeout can end this call
        raise AssertionError("unreachable")


class WrongReturnTool(BaseTool):
    name = "wrong_return"

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        return "plain text"  # type: ignore[return-value]


TOOLSET: dict[str, BaseTool] = {
    tool.name: tool for tool in (AddTool(), BrokenTool(), StuckTool(), WrongReturnTool())
}


def call(name: str, arguments: Any, **ctx: Any) -> ToolCallRecord:
    record = ToolCallRecord(name=name, arguments=arguments)
    return asyncio.run(run_tool_call(record, TOOLSET, timeout_s=0.05, ctx=ctx))


def test_it_rejects_a_tool_whose_parameters_are_not_an_object_schema() -> None:
    with pytest.raises(ValueError, match="type 'object'"):

        class ListTool(BaseTool):
            name = "list_tool"
            parameters = {"type": "array", "items": {"type": "string"}}


def test_it_rejects_a_tool_whose_parameters_are_not_valid_json_schema() -> None:
    with pytest.raises(ValueError, match="not a valid JSON Schema"):

        class BadSchemaTool(BaseTool):
            name = "bad_schema"
            parameters = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}


def test_it_rejects_a_tool_name_that_is_not_a_function_name() -> None:
    with pytest.raises(ValueError, match="letters, digits"):

        class SpacedTool(BaseTool):
            name = "two words"


def test_it_describes_a_tool_as_an_openai_function() -> None:
    schema = TOOLS.get("echo")().schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "echo"
    assert schema["function"]["parameters"]["required"] == ["text"]


def test_it_names_the_argument_that_breaks_the_schema() -> None:
    assert AddTool().argument_error({"a": 1, "b": "2"}) == "b: '2' is not of type 'integer'"
    assert "'b' is a required property" in (AddTool().argument_error({"a": 1}) or "")
    assert AddTool().argument_error({"a": 1, "b": 2}) is None
    assert AddTool().argument_error([1, 2]) == "arguments must be a JSON object, got list"


def test_it_runs_a_valid_call_with_its_row_context() -> None:
    record = call("add", {"a": 2, "b": 3}, bonus=10)
    assert (record.error, record.result, record.reward, record.info) == (None, "15", 0.5, {"bonus": 10})


def test_it_turns_an_unknown_tool_into_an_error_observation() -> None:
    record = call("subtract", {"a": 1})
    assert record.error == "unknown_tool"
    assert (
        record.result
        == "Error: tool 'subtract' not found. Available tools: [add, broken, stuck, wrong_return]"
    )


def test_it_turns_wrong_argument_types_into_an_error_observation() -> None:
    record = call("add", {"a": 1, "b": "two"})
    assert record.error == "invalid_arguments"
    assert record.result == "Error: invalid arguments for tool 'add': b: 'two' is not of type 'integer'"


def test_it_turns_an_exception_in_execute_into_an_error_observation() -> None:
    record = call("broken", {})
    assert record.error == "execution"
    assert record.result == "Error: tool 'broken' failed: RuntimeError: disk on fire"


def test_it_turns_a_call_that_outlives_its_timeout_into_an_error_observation() -> None:
    record = call("stuck", {})
    assert record.error == "timeout"
    assert record.result == "Error: tool 'stuck' timed out after 0.05 s"


def test_it_rejects_a_tool_that_returns_something_other_than_a_tool_result() -> None:
    record = call("wrong_return", {})
    assert record.error == "execution"
    assert "returned str, not ToolResult" in record.result
