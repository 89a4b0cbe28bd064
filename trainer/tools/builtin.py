"""Built-in tools that need nothing outside the trainer. Task tools live with their recipes."""

from __future__ import annotations

from typing import Any

from trainer.tools.base import BaseTool, ToolResult, one_string_parameter, register_tool


@register_tool
class EchoTool(BaseTool):
    """Returns its text unchanged: the smallest real tool, for smoke runs and tests."""

    name = "echo"
    description = "Return the given text unchanged."
    parameters = one_string_parameter("text", "The text to return.")

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        return ToolResult(text=args["text"])
