"""Nothing on /mlflow/ answers without reading the request body: gunicorn's threaded workers keep a
connection alive after each answer, and a body left unread is taken for the start of the next
request, which then waits for bytes that never come (docs/mlflow.md#calls-not-served)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver

from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port
from webapp.mlflow_api.plumbing import reads_body
from webapp.supervisor import web_command

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
CALLS = 100
# A client that waits longer than this for an answer has hung: the test fails instead of waiting
# for gunicorn's keep-alive to drop the connection.
CLIENT_TIMEOUT_S = 5


@pytest.fixture
def gunicorn(transactional_db: Any, tmp_path: Path) -> Iterator[int]:
    """The web tier as `make run` serves it (webapp/gunicorn_conf.py), one worker, on the test
    database (transactional: what the test writes is committed, so the server sees it)."""
    port = free_port()
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    env = {**os.environ, "DATABASE_URL": database, "STUDIO_VAR_DIR": str(tmp_path), "PORT": str(port)}
    argv = [*web_command(port, workers=1), "--access-logfile", "/dev/null"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
    try:
        poll_until(lambda: _listening(port, proc))
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def _listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"gunicorn exited ({proc.returncode})"
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/mlflow/")
        return conn.getresponse().status == 200
    except OSError:
        return False


def _post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any], token: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_served_and_unserved_calls_alternate_on_one_connection_without_a_wait(
    gunicorn: int, tokens: dict[str, str]
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", gunicorn, timeout=CLIENT_TIMEOUT_S)
    answers: list[tuple[int, Any]] = []
    sockets = set()
    for _ in range(CALLS // 2):
        answers.append(
            _post(conn, "/mlflow/api/2.0/mlflow/experiments/search", {"max_results": 10}, tokens["alice"])
        )
        sockets.add(conn.sock.getsockname() if conn.sock else None)  # the client's port: one connection
        unserved = {"name": "registered", "tags": [{"key": "k", "value": "x" * 2000}]}
        answers.append(
            _post(conn, "/mlflow/api/2.0/mlflow/registered-models/create", unserved, tokens["alice"])
        )

    assert [status for status, _ in answers[::2]] == [200] * (CALLS // 2)
    assert all("experiments" in body for _, body in answers[::2])
    assert answers[1::2] == [
        (404, {"error_code": "ENDPOINT_NOT_FOUND", "message": answers[1][1]["message"]})
    ] * (CALLS // 2)
    assert len(sockets) == 1  # all on one kept-alive connection


def _views(patterns: list[Any]) -> Iterator[Any]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _views(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            yield pattern.callback


def test_every_mlflow_route_reads_the_request_body_before_it_answers() -> None:
    mlflow_routes = next(
        p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and "mlflow" in str(p.pattern)
    )
    views = list(_views(mlflow_routes.url_patterns))
    assert views and all(getattr(view, "reads_body", None) is reads_body for view in views), views
