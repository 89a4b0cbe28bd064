"""Tools (BaseTool, TOOLS), tool-call formats (FORMATS) and the HTTP tool adapter."""

from __future__ import annotations

from trainer.tools import builtin as _builtin  # noqa: F401  (registers the built-in tools)
from trainer.tools.base import (
    TOOLS,
    BaseTool,
    ToolError,
    ToolResult,
    check_tool_definition,
    one_string_parameter,
    register_tool,
    run_tool_call,
)
from trainer.tools.formats import FORMATS, HermesFormat, ToolCallFormat
from trainer.tools.http import HttpTool, HttpToolError, HttpToolSpec, register_http_tool

__all__ = [
    "FORMATS",
    "TOOLS",
    "BaseTool",
    "HermesFormat",
    "HttpTool",
    "HttpToolError",
    "HttpToolSpec",
    "ToolCallFormat",
    "ToolError",
    "ToolResult",
    "check_tool_definition",
    "one_string_parameter",
    "register_http_tool",
    "register_tool",
    "run_tool_call",
]
