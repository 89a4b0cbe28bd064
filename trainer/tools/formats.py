"""Tool-call wire formats: how calls appear in a response and how results go back to the model.

A format parses a response into :class:`~trainer.mdp.ToolCallRecord` objects (malformed calls
included, with ``error="malformed"``; parsing never raises) and renders tool results as the one
user message that follows the assistant's turn (Agent-R1 ToolEnv semantics, docs/algorithms.md#toolenv).
"""

from __future__ import annotations

import contextlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from trainer.mdp import Message, ToolCallRecord
from trainer.registry import Registry


class ToolCallFormat(ABC):
    """One wire format. Instances are stateless and shared; register them in :data:`FORMATS`."""

    name: str = ""

    @abstractmethod
    def parse(self, text: str) -> list[ToolCallRecord]:
        """Every tool call in ``text`` in order; malformed ones carry ``error="malformed"``."""

    @abstractmethod
    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        """One call as the model writes it in its response (what :meth:`parse` reads back)."""

    @abstractmethod
    def render_results(self, results: Sequence[str]) -> Message:
        """The single message that carries the results of one turn's calls back to the model."""

    @abstractmethod
    def tools_prompt(self, tools: Sequence[dict[str, Any]]) -> str:
        """System-prompt text describing ``tools``, for chat templates that do not render tools."""


FORMATS: Registry[ToolCallFormat] = Registry("tool-call format")

# Non-greedy up to the closing tag, or to the end of the text when a truncated response left the
# block open; the second group tells the two apart.
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)

_HERMES_TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def _malformed(name: str, raw: str, reason: str) -> ToolCallRecord:
    hint = 'write <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
    return ToolCallRecord(
        name=name,
        arguments=raw,
        error="malformed",
        result=f"Error: malformed tool call ({reason}); {hint}",
        info={"reason": reason},
    )


def _parse_hermes_block(body: str, closed: bool) -> ToolCallRecord:
    raw = body.strip()
    if not closed:
        return _malformed("", raw, "missing </tool_call>")
    try:
        call = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _malformed("", raw, f"invalid JSON: {exc.msg}")
    if not isinstance(call, dict):
        return _malformed("", raw, "expected a JSON object")
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        return _malformed("", raw, 'missing "name"')
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        # Some models emit the arguments object JSON-encoded a second time, as OpenAI's API does.
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        return _malformed(name, raw, '"arguments" must be a JSON object')
    return ToolCallRecord(name=name, arguments=arguments)


class HermesFormat(ToolCallFormat):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Qwen / NousResearch Hermes)."""

    name = "hermes"

    def parse(self, text: str) -> list[ToolCallRecord]:
        return [_parse_hermes_block(m.group(1), bool(m.group(2))) for m in _HERMES_BLOCK.finditer(text)]

    def render_call(self, name: str, arguments: dict[str, Any]) -> str:
        call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"<tool_call>{call}</tool_call>"

    def render_results(self, results: Sequence[str]) -> Message:
        blocks = [f"<tool_response>\n{result}\n</tool_response>" for result in results]
        return {"role": "user", "content": "\n".join(blocks)}

    def tools_prompt(self, tools: Sequence[dict[str, Any]]) -> str:
        lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        return _HERMES_TOOLS_PROMPT.format(tools=lines)


FORMATS.add("hermes", HermesFormat())
