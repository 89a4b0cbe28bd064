"""The lookup tool: asks the recipe's loopback service for the value of one key."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from tasks_lib.lookup.service import service_url
from trainer.tools import BaseTool, ToolError, ToolResult, one_string_parameter, register_tool

TIMEOUT_S = 10.0


class MissingKey(ToolError, LookupError):
    """The service has no entry for the key, or refused the request."""


def fetch(table: int, key: str) -> str:
    """The value of ``key`` in the table of seed ``table``, over HTTP; MissingKey when there is none."""
    url = f"{service_url()}/lookup?{urlencode({'table': table, 'key': key})}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return str(json.load(response)["value"])
    except urllib.error.HTTPError as error:
        raise MissingKey(json.load(error).get("error", f"HTTP {error.code}")) from None


@register_tool
class LookupTool(BaseTool):
    """Looks a key up in the task's table. A row's ``tools_kwargs.lookup.table`` names the table's seed."""

    name = "lookup"
    description = "Look up the value stored under a key, e.g. 'maple-417'."
    parameters = one_string_parameter("key", "The key to look up.")

    async def execute(self, args: dict[str, Any], *, table: int = 0, **ctx: Any) -> ToolResult:
        return ToolResult(text=await asyncio.to_thread(fetch, int(table), args["key"]))
