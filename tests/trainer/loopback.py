"""A real HTTP server on loopback that records what it is sent (for reporter and CLI tests).

Not a test module: test_report.py and test_cli.py import it. The handler gunzips bodies sent with
``Content-Encoding: gzip``, answers POSTs through ``Recorder.answer`` and GETs from
``Recorder.files`` (401 without the right bearer token, 404 for unknown paths).
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "run-token-123"
RUN_ID = 7


# -- a real HTTP server that records what it is sent ------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any  # the decoded JSON (gunzipped when Content-Encoding says gzip)


@dataclass
class Recorder:
    requests: list[Recorded] = field(default_factory=list)
    # Decides the answer to each POST: (status, extra headers). Default: 200.
    answer: Callable[[Recorded], tuple[int, dict[str, str]]] = lambda request: (200, {})
    files: dict[str, bytes] = field(default_factory=dict)  # GET path -> body
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posts(self, suffix: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == "POST" and r.path.endswith(suffix)]


class _Handler(BaseHTTPRequestHandler):
    server: _RecordingServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        data = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
        recorded = Recorded("POST", self.path, dict(self.headers.items()), raw, json.loads(data))
        recorder = self.server.recorder
        with recorder.lock:
            recorder.requests.append(recorded)
        status, headers = recorder.answer(recorded)
        self._reply(status, b'{"ok": true}' if status < 300 else b'{"error": "no"}', headers)

    def do_GET(self) -> None:
        recorder = self.server.recorder
        with recorder.lock:
            recorder.requests.append(Recorded("GET", self.path, dict(self.headers.items()), b"", None))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._reply(401, b'{"error": "bad token"}', {})
        elif self.path in recorder.files:
            self._reply(200, recorder.files[self.path], {})
        else:
            self._reply(404, b'{"error": "not found"}', {})

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _RecordingServer(ThreadingHTTPServer):
    recorder: Recorder
    daemon_threads = True


class LoopbackServer:
    def __init__(self, recorder: Recorder, port: int = 0) -> None:
        self.recorder = recorder
        self.port = port
        self._httpd: _RecordingServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> LoopbackServer:
        self._httpd = _RecordingServer(("127.0.0.1", self.port), _Handler)
        self._httpd.recorder = self.recorder
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    """A loopback port where nothing listens (until a LoopbackServer is started on it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def wait_until(condition: Callable[[], bool], what: str, limit_s: float = 20.0) -> None:
    """Wait for the background thread to get somewhere; the limit only stops a hung test."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)
