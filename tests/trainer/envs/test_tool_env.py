from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainer.envs import ENVS, ToolEnv
from trainer.mdp import Action, Observation
from trainer.registry import RegistryError
from trainer.tools import BaseTool, ToolResult

ROW = {"prompt": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Go."}]}


class SlowTool(BaseTool):
    """Logs when each call starts and ends, with a pause between, so tests can see overlap."""

    name = "slow"
    parameters = {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]}

    def __init__(self, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.log = log

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        self.log.append(("start", args["tag"]))
        await asyncio.sleep(0.01)
        self.log.append(("end", args["tag"]))
        return ToolResult(text=f"done {args['tag']}", reward=1.0)


class ContextTool(BaseTool):
    name = "context"

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        return ToolResult(text=",".join(f"{key}={value}" for key, value in sorted(ctx.items())))


class NeverTool(BaseTool):
    name = "never"

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def call(name: str, arguments: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'


def step(env: ToolEnv, text: str) -> tuple[Observation, float | None, bool, dict[str, Any]]:
    return asyncio.run(env.step(Action(text=text)))


def test_it_is_registered_as_the_tool_env() -> None:
    assert ENVS.get("tool") is ToolEnv


def test_it_starts_from_the_row_prompt_and_offers_its_tools() -> None:
    observation = ToolEnv(tools=["echo"]).reset(**ROW)
    assert observation.messages == ROW["prompt"]
    assert [tool["function"]["name"] for tool in observation.tools] == ["echo"]
    assert observation.info == {"tool_format": "hermes"}


def test_it_feeds_tool_results_back_in_one_user_message() -> None:
    env = ToolEnv(tools=["echo"])
    env.reset(**ROW)
    text = "Checking. " + call("echo", '{"text": "one"}') + call("echo", '{"text": "two"}')
    observation, reward, done, info = step(env, text)
    assert (reward, done, info["tool_errors"], info["malformed_calls"]) == (0.0, False, 0, 0)
    assert observation.messages[-2:] == [
        {"role": "assistant", "content": text},
        {
            "role": "user",
            "content": "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>",
        },
    ]
    assert [record.result for record in info["tool_calls"]] == ["one", "two"]


def test_it_ends_the_episode_on_a_response_without_a_tool_call() -> None:
    env = ToolEnv(tools=["echo"])
    env.reset(**ROW)
    observation, reward, done, info = step(env, "The answer is 4.")
    assert (reward, done, info["termination_reason"], info["tool_calls"]) == (None, True, "final_answer", [])
    assert observation.messages[-1] == {"role": "assistant", "content": "The answer is 4."}


def test_it_runs_the_calls_of_one_turn_concurrently() -> None:
    log: list[tuple[str, str]] = []
    env = ToolEnv(tools=[SlowTool(log)])
    env.reset(**ROW)
    _, reward, _, _ = step(env, call("slow", '{"tag": "a"}') + call("slow", '{"tag": "b"}'))
    # Run one after the other, each call would end before the next one starts.
    assert log[:2] == [("start", "a"), ("start", "b")]
    assert sorted(log[2:]) == [("end", "a"), ("end", "b")]
    assert reward == 2.0


def test_it_counts_every_kind_of_bad_call_without_raising() -> None:
    env = ToolEnv(tools=["echo"], max_tool_calls_per_step=8)
    env.reset(**ROW)
    text = (
        call("echo", '{"text": "fine"}')
        + '<tool_call>{"name": "echo", "arguments": {"text": </tool_call>'  # malformed JSON
        + '<tool_call>{"arguments": {"text": "x"}}</tool_call>'  # missing name
        + call("search", '{"query": "x"}')  # unknown tool
        + call("echo", '{"text": 5}')  # wrong argument type
    )
    observation, reward, done, info = step(env, text)
    errors = [record.error for record in info["tool_calls"]]
    assert errors == [None, "malformed", "malformed", "unknown_tool", "invalid_arguments"]
    assert (info["tool_errors"], info["malformed_calls"], reward, done) == (4, 2, 0.0, False)
    assert observation.messages[-1]["content"].count("<tool_response>") == 5


def test_it_keeps_the_episode_going_after_only_malformed_calls() -> None:
    env = ToolEnv(tools=["echo"])
    env.reset(**ROW)
    observation, reward, done, info = step(env, "<tool_call>not json</tool_call>")
    assert (reward, done, info["malformed_calls"]) == (0.0, False, 1)
    assert "malformed tool call" in observation.messages[-1]["content"]


def test_it_times_out_a_call_and_reports_it() -> None:
    env = ToolEnv(tools=[NeverTool(), "echo"], tool_timeout_s=0.05)
    env.reset(**ROW)
    _, _, done, info = step(env, call("never", "{}") + call("echo", '{"text": "ok"}'))
    assert [(record.error, record.result) for record in info["tool_calls"]] == [
        ("timeout", "Error: tool 'never' timed out after 0.05 s"),
        (None, "ok"),
    ]
    assert (done, info["tool_errors"]) == (False, 1)


def test_it_refuses_calls_beyond_the_per_turn_limit() -> None:
    env = ToolEnv(tools=["echo"], max_tool_calls_per_step=1)
    env.reset(**ROW)
    _, _, _, info = step(env, call("echo", '{"text": "a"}') + call("echo", '{"text": "b"}'))
    assert [record.error for record in info["tool_calls"]] == [None, "too_many_calls"]
    assert info["tool_errors"] == 1


def test_it_passes_the_rows_tools_kwargs_to_the_tool() -> None:
    env = ToolEnv(tools=[ContextTool()], tools_kwargs={"context": {"corpus": "wiki", "k": 1}})
    row = {**ROW, "extra_info": {"index": 0, "tools_kwargs": {"context": {"k": 3, "answer": "42"}}}}
    env.reset(**row)
    _, _, _, info = step(env, call("context", "{}"))
    assert info["tool_calls"][0].result == "answer=42,k=3"  # the row's entry replaces the env's for that tool


def test_it_rejects_an_unknown_tool_name_listing_the_registered_ones() -> None:
    with pytest.raises(RegistryError, match=r"unknown tool 'nope'; choose one of: .*echo"):
        ToolEnv(tools=["nope"])


def test_it_rejects_a_tool_list_given_as_a_string() -> None:
    with pytest.raises(ValueError, match="list of tool names"):
        ToolEnv(tools="echo")
