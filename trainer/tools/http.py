"""Calls to a team's endpoints: the adapter behind team HTTP tools, and the checked POST of remote rewards.

Every outbound request of a tool or a reward is checked against the web app's
:class:`~trainer.tools.allowlist.OutboundPolicy` first (the one rule the web app applies too), so an
entry taken off STUDIO_TOOL_ALLOWLIST stops being called mid-run (docs/tools.md#allowed-hosts).

An :class:`HttpToolSpec` says where the tool lives; :class:`HttpTool` sends the validated
arguments there (POST: JSON body; GET: query string) and reads back either a JSON object
``{"text": ..., "reward": ..., "info": {...}}``, any other JSON value, or plain text.
Per-row ``tools_kwargs`` are not sent: the endpoint sees only what the model wrote.

A spec with an :class:`~trainer.tools.allowlist.OutboundPolicy` (every team tool the web app builds)
is checked on every call: the URL against the rules, then the address its host resolves to at that
moment, and the request goes to that address (docs/security.md#outbound). Redirects are not
followed: a 3xx answer is an error. Answers larger than ``MAX_RESPONSE_BYTES`` are refused.
"""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import dataclass, field
from typing import Any

import httpx

from trainer.tools.allowlist import (
    OutboundPolicy,
    Target,
    check_url,
    choose_address,
    pinned,
    resolved_services,
)
from trainer.tools.base import TOOLS, BaseTool, ToolError, ToolResult, check_tool_definition

_METHODS = ("GET", "POST")
# An observation the model reads: a megabyte is already far more than any prompt holds.
MAX_RESPONSE_BYTES = 1024 * 1024


class HttpToolError(ToolError, RuntimeError):
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
    # None: the caller owns the machine (a config file's tool); the web app always sets one.
    policy: OutboundPolicy | None = None

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


def _result_from_response(response: httpx.Response, body: bytes, url: str) -> ToolResult:
    if "json" not in response.headers.get("content-type", ""):
        return ToolResult(text=body.decode(response.encoding or "utf-8", errors="replace"))
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HttpToolError(f"{url} sent invalid JSON: {exc}") from exc
    if isinstance(data, dict) and "text" in data:
        reward = data.get("reward")
        info = data.get("info") or {}
        if reward is not None and not isinstance(reward, int | float):
            raise HttpToolError(f"{url} sent a non-numeric reward: {reward!r}")
        if not isinstance(info, dict):
            raise HttpToolError(f"{url} sent info that is not an object: {info!r}")
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
        url, headers = spec.url, {"Accept": "application/json"}
        extensions: dict[str, Any] = {}
        if spec.policy is not None:
            url, pinned_headers, extensions = await _checked_destination(spec.url, spec.policy)
            headers.update(pinned_headers)
        if spec.secret:
            headers[spec.secret_header] = spec.secret
        request: dict[str, Any] = {"json": args} if spec.method == "POST" else {"params": _query_params(args)}
        try:
            # A client per call: rollouts may run under different event loops, and a pooled
            # client is bound to the loop it was created in. Redirects stay unfollowed (httpx's
            # default): where one points was never checked.
            async with (
                httpx.AsyncClient(timeout=spec.timeout_s, follow_redirects=False, trust_env=False) as client,
                client.stream(
                    spec.method, url, headers=headers, extensions=extensions, **request
                ) as response,
            ):
                body = await _read_capped(response, spec.url)
        except httpx.TimeoutException as exc:
            raise TimeoutError(f"timed out after {spec.timeout_s:g} s ({spec.method} {spec.url})") from exc
        if response.is_redirect or 300 <= response.status_code < 400:
            location = response.headers.get("location", "")
            raise HttpToolError(
                f"HTTP {response.status_code} from {spec.url}: the tool answered with a redirect"
                f"{f' to {location}' if location else ''}, which is not followed; point the tool at the final URL"
            )
        if response.status_code >= 400:
            text = body[:200].decode("utf-8", errors="replace")
            raise HttpToolError(f"HTTP {response.status_code} from {spec.url}: {text}")
        return _result_from_response(response, body, spec.url)


async def _checked_destination(
    url: str, policy: OutboundPolicy
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Check ``url`` and the address its host resolves to now; the request is sent to that address."""
    target: Target = check_url(url, policy)
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    services = await asyncio.to_thread(resolved_services, policy, _resolve)
    return pinned(target, choose_address(target, services, addresses))


def _resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]


def _checked_destination_sync(url: str, policy: OutboundPolicy) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The same check for synchronous callers (rewards are scored outside the tools' event loop)."""
    target: Target = check_url(url, policy)
    infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    services = resolved_services(policy, _resolve)
    return pinned(target, choose_address(target, services, addresses))


async def _read_capped(response: httpx.Response, url: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise HttpToolError(f"{url} answered with more than {MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def register_http_tool(spec: HttpToolSpec) -> type[HttpTool]:
    """Register ``spec`` in :data:`TOOLS` under its name, so envs can list it like any other tool."""
    attrs = {"spec": spec, "name": spec.name, "description": spec.description, "parameters": spec.parameters}
    tool_class = type(f"HttpTool_{spec.name}", (HttpTool,), attrs)
    TOOLS.add(spec.name, tool_class)
    return tool_class


# -- checked POSTs (remote rewards, the web app's alert webhooks) ----------------------------------


def post_checked(
    url: str, policy: OutboundPolicy | None, timeout_s: float, headers: dict[str, str], body: Any
) -> tuple[int, bytes]:
    """One checked POST (docs/security.md#outbound): (status, body capped at MAX_RESPONSE_BYTES)."""
    headers = dict(headers)
    extensions: dict[str, Any] = {}
    if policy is not None:
        url, pinned_headers, extensions = _checked_destination_sync(url, policy)
        headers.update(pinned_headers)
    with (
        httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client,
        client.stream("POST", url, json=body, headers=headers, extensions=extensions) as response,
    ):
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise HttpToolError(f"answered with more than {MAX_RESPONSE_BYTES} bytes")
            chunks.append(chunk)
        return response.status_code, b"".join(chunks)
