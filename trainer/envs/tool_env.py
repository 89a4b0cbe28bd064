"""ToolEnv: a chat where the model calls tools until it answers (Agent-R1 semantics,
docs/algorithms.md#toolenv)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.envs.base import ENVS, AgentEnv, prompt_messages
from trainer.mdp import Action, Message, Observation, ToolCallRecord
from trainer.tools import FORMATS, TOOLS, BaseTool, run_tool_call


def _instantiate(tools: Sequence[str | BaseTool]) -> dict[str, BaseTool]:
    if isinstance(tools, str | bytes):
        raise ValueError(f"tools must be a list of tool names, not the string {tools!r}")
    by_name: dict[str, BaseTool] = {}
    for entry in tools:
        tool = TOOLS.get(entry)() if isinstance(entry, str) else entry
        if isinstance(entry, str) and tool.name != entry:
            raise ValueError(
                f"tool registered as {entry!r} calls itself {tool.name!r}; register it under its name"
            )
        if tool.name in by_name:
            raise ValueError(f"tool {tool.name!r} is listed twice")
        by_name[tool.name] = tool
    return by_name


@ENVS.register("tool")
class ToolEnv(AgentEnv):
    """Keeps the chat history, runs the tool calls in each response concurrently, and feeds the
    results back as one user message. A response with no tool call is the final answer: the
    episode ends with reward None so the reward function scores it.

    ``info`` of each step holds ``tool_calls`` (records, errors included), ``tool_errors`` (calls
    that failed for any reason, malformed ones included) and ``malformed_calls``.
    """

    def __init__(
        self,
        tools: Sequence[str | BaseTool] = (),
        tool_format: str = "hermes",
        tools_kwargs: Mapping[str, Any] | None = None,
        max_tool_calls_per_step: int = 4,
        tool_timeout_s: float = 30.0,
    ) -> None:
        super().__init__()
        if max_tool_calls_per_step < 1:
            raise ValueError(f"max_tool_calls_per_step must be at least 1, got {max_tool_calls_per_step}")
        if tool_timeout_s <= 0:
            raise ValueError(f"tool_timeout_s must be positive, got {tool_timeout_s}")
        self.tools = _instantiate(tools)
        self.format = FORMATS.get(tool_format)
        self.base_tools_kwargs = dict(tools_kwargs or {})
        self.tools_kwargs = dict(self.base_tools_kwargs)
        self.max_tool_calls_per_step = max_tool_calls_per_step
        self.tool_timeout_s = tool_timeout_s
        self.messages: list[Message] = []

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    def observation(self) -> Observation:
        return Observation(
            messages=list(self.messages), tools=self.tool_schemas, info={"tool_format": self.format.name}
        )

    def reset(self, **row: Any) -> Observation:
        self.messages = prompt_messages(row)
        # Per-row tools_kwargs (extra_info.tools_kwargs, keyed by tool name) refine the env's own.
        row_kwargs = (row.get("extra_info") or {}).get("tools_kwargs") or {}
        self.tools_kwargs = {**self.base_tools_kwargs, **dict(row_kwargs)}
        # verl's data names its tools only there (its tool list is the trainer's config): a tool a
        # row gives kwargs to is offered to that row too (docs/datasets.md#tools-kwargs).
        for name, kwargs in row_kwargs.items():
            if kwargs is not None and name not in self.tools and name in TOOLS:
                self.tools.update(_instantiate([name]))
        return self.observation()

    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        calls = self.format.parse(action.text)
        self.messages.append({"role": "assistant", "content": action.text})
        if not calls:
            info = {
                "tool_calls": [],
                "tool_errors": 0,
                "malformed_calls": 0,
                "termination_reason": "final_answer",
            }
            return self.observation(), None, True, info
        records = await asyncio.gather(*(self._run(index, call) for index, call in enumerate(calls)))
        self.messages.append(self.format.render_results([record.result for record in records]))
        rewards = [record.reward for record in records if record.reward is not None]
        info = {
            "tool_calls": list(records),
            "tool_errors": sum(record.error is not None for record in records),
            "malformed_calls": sum(record.error == "malformed" for record in records),
        }
        return self.observation(), float(sum(rewards)), False, info

    async def _run(self, index: int, call: ToolCallRecord) -> ToolCallRecord:
        if call.error is not None:  # malformed: the parser already wrote the error observation
            return call
        if index >= self.max_tool_calls_per_step:
            call.error = "too_many_calls"
            call.result = (
                f"Error: at most {self.max_tool_calls_per_step} tool calls per turn; this one was not run"
            )
            return call
        ctx = self.tools_kwargs.get(call.name) or {}
        return await run_tool_call(call, self.tools, timeout_s=self.tool_timeout_s, ctx=ctx)
