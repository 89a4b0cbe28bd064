from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from trainer.mdp import ToolCallRecord
from trainer.tools import TOOLS, HttpTool, HttpToolSpec, register_http_tool, run_tool_call
from trainer.tools.allowlist import OutboundPolicy
from trainer.tools.http import MAX_RESPONSE_BYTES

PARAMETERS = {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}}}


@dataclass
class ToolServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _handler(server: ToolServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self, payload: Any) -> None:
            path = urlsplit(self.path).path
            server.requests.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers), "json": payload}
            )
            if path == "/search":
                answer = {"text": f"results for {payload['query']}", "reward": 0.25, "info": {"hits": 2}}
                self._answer(200, json.dumps(answer).encode(), "application/json")
            elif path == "/plain":
                self._answer(200, b"just text", "text/plain; charset=utf-8")
            elif path == "/moved":
                self.send_response(302)
                self.send_header("Location", "http://127.0.0.1:5432/")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path == "/huge":
                self._answer(200, b"x" * (MAX_RESPONSE_BYTES + 1), "text/plain")
            elif path == "/slow":
                server.release.wait(10)  # the test releases it once the client has given up
                self._answer(200, b"late", "text/plain")
            else:
                self._answer(500, b"internal trouble", "text/plain")

        def do_POST(self) -> None:
            self._route(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

        def do_GET(self) -> None:
            self._route(parse_qs(urlsplit(self.path).query))

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


@pytest.fixture
def tool_server() -> Iterator[ToolServer]:
    state = ToolServer(url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def spec(url: str, **overrides: Any) -> HttpToolSpec:
    fields: dict[str, Any] = {"name": "search", "description": "Search the corpus.", "parameters": PARAMETERS}
    return HttpToolSpec(url=url, **(fields | overrides))


def call(tool: HttpTool, arguments: dict[str, Any], timeout_s: float = 30.0) -> ToolCallRecord:
    record = ToolCallRecord(name=tool.name, arguments=arguments)
    return asyncio.run(run_tool_call(record, {tool.name: tool}, timeout_s=timeout_s))


def test_it_posts_the_arguments_as_json_with_the_secret_header(tool_server: ToolServer) -> None:
    tool = HttpTool(spec(f"{tool_server.url}/search", secret="s3cret", secret_header="X-Team-Secret"))
    record = call(tool, {"query": "alpha", "k": 3})
    assert (record.error, record.result, record.reward, record.info) == (
        None,
        "results for alpha",
        0.25,
        {"hits": 2},
    )
    (request,) = tool_server.requests
    assert request["method"] == "POST"
    assert request["json"] == {"query": "alpha", "k": 3}
    assert request["headers"]["X-Team-Secret"] == "s3cret"


def test_it_sends_get_arguments_as_a_query_string(tool_server: ToolServer) -> None:
    tool = HttpTool(spec(f"{tool_server.url}/plain", method="GET"))
    record = call(tool, {"query": "two words", "k": 5})
    assert (record.error, record.result) == (None, "just text")
    (request,) = tool_server.requests
    assert (request["method"], request["json"]) == ("GET", {"query": ["two words"], "k": ["5"]})
    assert "X-Tool-Secret" not in request["headers"]


def test_it_turns_an_http_error_status_into_an_error_observation(tool_server: ToolServer) -> None:
    record = call(HttpTool(spec(f"{tool_server.url}/missing")), {"query": "x"})
    assert record.error == "execution"
    assert "HTTP 500" in record.result and "internal trouble" in record.result


def test_it_turns_a_slow_endpoint_into_a_timeout_observation(tool_server: ToolServer) -> None:
    record = call(HttpTool(spec(f"{tool_server.url}/slow", timeout_s=0.2)), {"query": "x"})
    assert record.error == "timeout"
    assert record.result == f"Error: tool 'search' timed out after 0.2 s (POST {tool_server.url}/slow)"


def test_it_validates_arguments_before_calling_the_endpoint(tool_server: ToolServer) -> None:
    record = call(HttpTool(spec(f"{tool_server.url}/search")), {"query": 7})
    assert record.error == "invalid_arguments"
    assert tool_server.requests == []


def test_it_registers_a_spec_as_a_named_tool(tool_server: ToolServer) -> None:
    # A name no recipe uses: tasks_lib's hotpotqa registers "search" once plugins are loaded.
    tool_class = register_http_tool(spec(f"{tool_server.url}/search", name="team_search"))
    try:
        tool = TOOLS.get("team_search")()
        assert tool_class is TOOLS.get("team_search")
        assert tool.schema()["function"]["name"] == "team_search"
        assert call(tool, {"query": "beta"}).result == "results for beta"
    finally:
        TOOLS.unregister("team_search")


def test_it_rejects_a_spec_without_an_http_url_or_with_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        spec("ftp://example.org/tool")
    with pytest.raises(ValueError, match="method must be one of GET, POST"):
        spec("http://127.0.0.1/tool", method="PUT")


def _policy(*rules: str, services: tuple[tuple[str, int], ...] = ()) -> OutboundPolicy:
    return OutboundPolicy.from_texts(rules, services)


def test_a_redirect_is_an_error_naming_where_it_pointed_and_is_not_followed(tool_server: ToolServer) -> None:
    port = urlsplit(tool_server.url).port
    tool = HttpTool(spec(f"{tool_server.url}/moved", policy=_policy(f"127.0.0.1:{port}")))
    record = call(tool, {"query": "x"})
    assert record.error == "execution"
    assert "HTTP 302" in record.result and "redirect to http://127.0.0.1:5432/" in record.result
    assert [r["path"] for r in tool_server.requests] == ["/moved"]


def test_an_answer_over_the_size_limit_is_an_error(tool_server: ToolServer) -> None:
    record = call(HttpTool(spec(f"{tool_server.url}/huge")), {"query": "x"})
    assert record.error == "execution" and f"more than {MAX_RESPONSE_BYTES} bytes" in record.result


def test_with_a_policy_the_url_must_match_a_rule_on_every_call(tool_server: ToolServer) -> None:
    port = urlsplit(tool_server.url).port
    allowed = HttpTool(spec(f"{tool_server.url}/search", policy=_policy(f"http://127.0.0.1:{port}/search")))
    assert call(allowed, {"query": "a"}).result == "results for a"
    other_path = HttpTool(spec(f"{tool_server.url}/plain", policy=_policy(f"http://127.0.0.1:{port}/search")))
    record = call(other_path, {"query": "a"})
    assert record.error == "execution" and "is not allowed; the outbound targets are" in record.result
    assert [r["path"] for r in tool_server.requests] == ["/search"]


def test_a_host_name_is_resolved_at_call_time_and_the_request_sent_to_the_checked_address(
    tool_server: ToolServer,
) -> None:
    port = urlsplit(tool_server.url).port
    # "localhost" is the rule's own name, so reaching this machine is what the administrator allowed.
    by_name = HttpTool(spec(f"http://localhost:{port}/search", policy=_policy(f"localhost:{port}")))
    assert call(by_name, {"query": "n"}).result == "results for n"
    (request,) = tool_server.requests
    assert request["headers"]["Host"] == f"localhost:{port}"  # the name, though the address was dialled


def test_the_products_own_service_port_is_refused_at_call_time(tool_server: ToolServer) -> None:
    port = urlsplit(tool_server.url).port
    policy = OutboundPolicy.from_texts([f"127.0.0.1:{port}"], [("localhost", port)])
    record = call(HttpTool(spec(f"{tool_server.url}/search", policy=policy)), {"query": "x"})
    assert record.error == "execution" and "is the product's own service" in record.result
    assert tool_server.requests == []
