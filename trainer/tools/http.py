"""Calls to a team's endpoints: the adapter behind team HTTP tools, and remote rewards.

Every outbound request of a tool or a reward goes through :func:`send` (async, tools) or
:func:`send_sync` (rewards, which are scored synchronously): they check the destination against
the allowlist first (:func:`check_destination`, the one rule the web app applies too, see
docs/tools.md#allowed-hosts), so a host taken off the list stops being called mid-run.

An :class:`HttpToolSpec` says where the tool lives; :class:`HttpTool` sends the validated
arguments there (POST: JSON body; GET: query string) and reads back either a JSON object
``{"text": ..., "reward": ..., "info": {...}}``, any other JSON value, or plain text.
Per-row ``tools_kwargs`` are not sent: the endpoint sees only what the model wrote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from trainer.tools.base import TOOLS, BaseTool, ToolResult, check_tool_definition

if TYPE_CHECKING:
    from trainer.contract import TeamRewardSpec
    from trainer.rewards import RewardFn

_METHODS = ("GET", "POST")


class HttpToolError(RuntimeError):
    """The endpoint answered with an HTTP error status or a body we cannot read."""


class DestinationRefused(PermissionError):
    """The URL's host is not on the allowlist."""


def host_allowed(url: str, allowlist: Sequence[str]) -> bool:
    """Whether ``url``'s host is one of ``allowlist`` (case-insensitive host names)."""
    host = (urlsplit(url).hostname or "").lower()
    return bool(host) and host in {allowed.lower() for allowed in allowlist}


def check_destination(url: str, allowlist: Sequence[str] | None) -> None:
    """Refuse a URL whose host is not allowed; ``None`` means the caller already vouched for it."""
    if allowlist is not None and not host_allowed(url, allowlist):
        raise DestinationRefused(f"the host of {url} is not on the tool host allowlist")


async def send(
    method: str, url: str, *, allowlist: Sequence[str] | None, timeout_s: float,
    headers: Mapping[str, str], json_body: Any = None, params: Mapping[str, str] | None = None,
) -> httpx.Response:  # fmt: skip
    """One outbound request of a tool, after the destination check."""
    check_destination(url, allowlist)
    # A client per call: rollouts may run under different event loops, and a pooled client is bound
    # to the loop it was created in.
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
        return await client.request(method, url, json=json_body, params=params, headers=dict(headers))


def send_sync(
    method: str, url: str, *, allowlist: Sequence[str] | None, timeout_s: float,
    headers: Mapping[str, str], json_body: Any = None,
) -> httpx.Response:  # fmt: skip
    """The same for synchronous callers (rewards are scored outside the tools' event loop)."""
    check_destination(url, allowlist)
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
        return client.request(method, url, json=json_body, headers=dict(headers))


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
    # Hosts the tool may call, checked at every call; None: the builder checked it (the try-it page).
    allowlist: tuple[str, ...] | None = None

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
        body, params = (args, None) if spec.method == "POST" else (None, _query_params(args))
        try:
            response = await send(
                spec.method, spec.url, allowlist=spec.allowlist, timeout_s=spec.timeout_s,
                headers=headers, json_body=body, params=params,
            )  # fmt: skip
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


# -- remote rewards ---------------------------------------------------------------------------------


def _score_from(response: httpx.Response) -> float | dict[str, Any]:
    if response.status_code >= 400:
        raise HttpToolError(f"HTTP {response.status_code} from {response.url}: {response.text[:200]}")
    try:
        data = response.json()
    except ValueError as exc:
        raise HttpToolError(f"{response.url} sent a body that is not JSON: {response.text[:200]!r}") from exc
    if isinstance(data, dict) and isinstance(data.get("score"), int | float):
        return {key: value for key, value in data.items() if isinstance(value, int | float)}
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    raise HttpToolError(f'{response.url} sent {str(data)[:200]}; expected {{"score": <number>}}')


def remote_reward(spec: TeamRewardSpec, allowlist: Sequence[str] | None = None) -> RewardFn:
    """A reward function that POSTs ``{data_source, response, ground_truth, extra_info}`` to the
    spec's endpoint and reads ``{"score": x, ...}`` (or a bare number) back, with ``retries`` more
    tries after a timeout, a connection error or a 5xx. When every try fails it raises RewardError:
    the step scores 0 and the run counts a reward error (docs/rewards.md#remote-rewards)."""
    from trainer.contract import to_jsonable
    from trainer.rewards import RewardError

    headers = {"Accept": "application/json"}
    if spec.secret:
        headers[spec.secret_header] = spec.secret

    def score(
        solution_str: str, ground_truth: Any, extra_info: dict[str, Any], *, data_source: str = ""
    ) -> float | dict[str, Any]:
        body = {
            "data_source": data_source or spec.data_source, "response": solution_str,
            "ground_truth": to_jsonable(ground_truth), "extra_info": to_jsonable(extra_info),
        }  # fmt: skip
        problem = ""
        for attempt in range(spec.retries + 1):
            try:
                response = send_sync(
                    "POST", spec.url, allowlist=allowlist, timeout_s=spec.timeout_s,
                    headers=headers, json_body=body,
                )  # fmt: skip
            except httpx.TimeoutException:
                problem = f"timed out after {spec.timeout_s:g} s"
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            except DestinationRefused as exc:
                raise RewardError(f"reward {spec.name!r}: {exc}") from None
            else:
                if response.status_code < 500:
                    try:
                        return _score_from(response)
                    except HttpToolError as exc:
                        raise RewardError(f"reward {spec.name!r}: {exc}") from None
                problem = f"HTTP {response.status_code}"
            if attempt < spec.retries:
                time.sleep(min(0.2 * 2**attempt, 2.0))
        tries = spec.retries + 1
        raise RewardError(f"reward {spec.name!r} ({spec.url}): {problem} ({tries} tries)")

    score.takes_data_source = True  # type: ignore[attr-defined]
    return score
