"""MLflow's own tracking server, for the tests that compare with it or import from it: the full
`mlflow` package in its own virtual environment (bench/_common.py installs it once under var/bench/),
on SQLite, on loopback; it stops with the test module, and by itself after a quarter of an hour
should the test die first."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from bench._common import ensure_mlflow
from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port

SERVER_LIFETIME_S = 900  # MLflow's server stops itself then, whatever happens to the test


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow-server")
    mlflow = ensure_mlflow()
    port = free_port()
    argv = [
        "timeout", str(SERVER_LIFETIME_S), str(mlflow), "server",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", (root / "artifacts").as_uri(),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(argv, cwd=root, stdout=log, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        poll_until(lambda: _answers(url + "/health", proc))
        yield url
    finally:
        _stop(proc)
        log.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL: uvicorn waits for the client's kept-alive connections otherwise."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
            return


def _answers(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"MLflow's server exited ({proc.returncode})"
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
