"""A loopback HTTP tool endpoint for the tests: started by the fixture, stopped after the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ToolServer:
    url: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    # The /slow endpoint waits on this; teardown sets it so no handler thread outlives the test.
    release: threading.Event = field(default_factory=threading.Event)


def _handler(server: ToolServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            server.calls.append({"path": self.path, "body": body, "headers": dict(self.headers)})
            if self.path == "/slow":
                server.release.wait()
            answer = {"text": f"hello {body.get('query')}", "reward": 0.5, "info": {"path": self.path}}
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # keep the test output clean
            pass

    return Handler


# The port the tests' registered tools name when nothing has to answer (discard: nothing listens).
UNUSED_TOOL_ADDRESS = "127.0.0.1:9"


def allow_tools_at(settings: Any, monkeypatch: pytest.MonkeyPatch, *entries: str) -> None:
    """STUDIO_TOOL_ALLOWLIST for this process (settings) and for the workers a test starts (env)."""
    settings.TOOL_ALLOWLIST = [*settings.TOOL_ALLOWLIST, *entries]
    monkeypatch.setenv("STUDIO_TOOL_ALLOWLIST", ",".join(settings.TOOL_ALLOWLIST))


@pytest.fixture(autouse=True)
def tool_allowlist(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    allow_tools_at(settings, monkeypatch, UNUSED_TOOL_ADDRESS)


@pytest.fixture
def loopback_endpoint() -> Iterator[ToolServer]:
    """A loopback tool endpoint that no outbound rule allows yet."""
    holder = ToolServer(url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    httpd.daemon_threads = True
    holder.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield holder
    holder.release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def tool_server(
    settings: Any, monkeypatch: pytest.MonkeyPatch, tool_allowlist: None, loopback_endpoint: ToolServer
) -> ToolServer:
    """A loopback tool endpoint that STUDIO_TOOL_ALLOWLIST allows."""
    allow_tools_at(settings, monkeypatch, loopback_endpoint.url.removeprefix("http://"))
    return loopback_endpoint
