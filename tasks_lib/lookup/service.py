"""The lookup service: a small HTTP server on loopback that answers ``GET /lookup?table=S&key=K``.

The lookup task's answers exist only here (docs/recipes.md#lookup). One server per process, started
on the first call on 127.0.0.1 and a free port; it stops by itself after ``IDLE_S`` seconds without
a request (the next call starts it again), and its thread is a daemon, so it never outlives the
process that started it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tasks_lib.lookup.table import table

IDLE_S = 300.0
MAX_TABLE_SEED = 1_000_000


class _Handler(BaseHTTPRequestHandler):
    server: _LookupServer

    def do_GET(self) -> None:
        self.server.last_request = time.monotonic()
        url = urlparse(self.path)
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        status, body = _answer(url.path, query)
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a rollout makes many calls."""


def _answer(path: str, query: dict[str, str]) -> tuple[int, dict[str, str]]:
    if path != "/lookup":
        return 404, {"error": "unknown path; use /lookup?table=SEED&key=KEY"}
    seed = query.get("table", "0")
    if not seed.isdigit() or int(seed) > MAX_TABLE_SEED:
        return 400, {"error": f"table must be a number up to {MAX_TABLE_SEED}"}
    key = query.get("key", "").strip()
    value = table(int(seed)).get(key)
    if value is None:
        return 404, {"error": f"no entry for the key {key!r}"}
    return 200, {"key": key, "value": value}


class _LookupServer(ThreadingHTTPServer):
    daemon_threads = True
    last_request = 0.0


_lock = threading.Lock()
_server: _LookupServer | None = None


def _serve_until_idle(server: _LookupServer) -> None:
    global _server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
    thread.start()
    while True:
        time.sleep(min(IDLE_S, 5.0))
        with _lock:
            if time.monotonic() - server.last_request >= IDLE_S:
                _server = None if _server is server else _server
                break
    server.shutdown()
    server.server_close()


def service_url() -> str:
    """The running service's base URL (``http://127.0.0.1:PORT``), starting it when it is not up."""
    global _server
    with _lock:
        if _server is None:
            _server = _LookupServer(("127.0.0.1", 0), _Handler)
            _server.last_request = time.monotonic()
            threading.Thread(target=_serve_until_idle, args=(_server,), daemon=True).start()
        _server.last_request = time.monotonic()
        return f"http://127.0.0.1:{_server.server_address[1]}"
