"""Tools served over HTTP: the adapter behind team-registered tools.

An :class:`HttpToolSpec` says where the tool lives; :class:`HttpTool` sends the validated
arguments there (POST: JSON body; GET: query string) and reads back either a JSON object
``{"text": ..., "reward": ..., "info": {...}}``, any other JSON value, or plain text.
Per-row ``tools_kwargs`` are not sent: the endpoint sees only what the model wrote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from trainer.tools.base import TOOLS, BaseTool, ToolResult, check_tool_definition

_METHODS = ("GET", "POST")


class HttpToolError(RuntimeError):
    """The endpoint answered with an HTTP error status or a body we cannot read."""


@dataclass(frozen=True)
class HttpToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    url: str
    method: str = "POST"
    timeout_s: float = 10.0
    # Sent as ``secret_header: secret`` so the endpoint can tell our calls from anyone else's.
    secret: str | None = field(default=None, repr=False)
    secret_header: str = "X-Tool-Secret"

    def __post_init__(self) -> None:
        check_tool_definition(self.name, self.parameters)
        if self.method not in _METHODS:
            raise ValueError(
                f"tool {self.name!r}: method must be one of {', '.join(_METHODS)}, not {self.method!r}"
            )
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"tool {self.name!r}: url must start with http:// or https://, got {self.url!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be positive, got {self.timeout_s}")


def _query_params(args: dict[str, Any]) -> dict[str, str]:
    # Scalars travel as themselves; nested values as JSON so nothing is silently flattened.
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in args.items()}


def _result_from_response(response: httpx.Response) -> ToolResult:
    if "json" not in response.headers.get("content-type", ""):
        return ToolResult(text=response.text)
    try:
        data = response.json()
    except ValueError as exc:
        raise HttpToolError(f"{response.url} sent invalid JSON: {exc}") from exc
    if isinstance(data, dict) and "text" in data:
        reward = data.get("reward")
        info = data.get("info") or {}
        if reward is not None and not isinstance(reward, int | float):
            raise HttpToolError(f"{response.url} sent a non-numeric reward: {reward!r}")
        if not isinstance(info, dict):
            raise HttpToolError(f"{response.url} sent info that is not an object: {info!r}")
        return ToolResult(text=str(data["text"]), reward=None if reward is None else float(reward), info=info)
    return ToolResult(text=data if isinstance(data, str) else json.dumps(data, ensure_ascii=False))


class HttpTool(BaseTool):
    """Calls the endpoint described by ``spec`` (given here, or set on a class by :func:`register_http_tool`)."""

    spec: HttpToolSpec | None = None

    def __init__(self, spec: HttpToolSpec | None = None, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        spec = spec or type(self).spec
        if spec is None:
            raise ValueError("HttpTool needs an HttpToolSpec")
        self.spec = spec
        self.name, self.description, self.parameters = spec.name, spec.description, spec.parameters

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        spec = self.spec
        if spec is None:  # set in __init__; narrowed here for the type checker
            raise ValueError("HttpTool needs an HttpToolSpec")
        headers = {"Accept": "application/json"}
        if spec.secret:
            headers[spec.secret_header] = spec.secret
        try:
            # A client per call: rollouts may run under different event loops, and a pooled
            # client is bound to the loop it was created in.
            async with httpx.AsyncClient(timeout=spec.timeout_s) as client:
                if spec.method == "POST":
                    response = await client.post(spec.url, json=args, headers=headers)
                else:
                    response = await client.get(spec.url, params=_query_params(args), headers=headers)
        except httpx.TimeoutException as exc:
            raise TimeoutError(f"timed out after {spec.timeout_s:g} s ({spec.method} {spec.url})") from exc
        if response.status_code >= 400:
            raise HttpToolError(f"HTTP {response.status_code} from {spec.url}: {response.text[:200]}")
        return _result_from_response(response)


def register_http_tool(spec: HttpToolSpec) -> type[HttpTool]:
    """Register ``spec`` in :data:`TOOLS` under its name, so envs can list it like any other tool."""
    attrs = {"spec": spec, "name": spec.name, "description": spec.description, "parameters": spec.parameters}
    tool_class = type(f"HttpTool_{spec.name}", (HttpTool,), attrs)
    TOOLS.add(spec.name, tool_class)
    return tool_class
