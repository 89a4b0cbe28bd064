"""The official client runs one battery (tests/webapp/mlflow_api/battery.py) against our endpoint and
against MLflow's own server of the same version, started here; the answers, ids and times
normalised, must be the same but for the differences named below, each with its reason
(docs/mlflow.md#how-close-to-mlflow).

MLflow's server is the full `mlflow` package in its own virtual environment (bench/_common.py
installs it once under var/bench/), on SQLite, on loopback; it stops with the test, and by itself
after a quarter of an hour should the test die first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench._common import ensure_mlflow
from tests.webapp.mlflow_api.battery import Battery, run_battery
from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port

pytestmark = pytest.mark.slow

SERVER_LIFETIME_S = 900  # MLflow's server stops itself then, whatever happens to the test

# Calls whose answers differ on purpose, and why (docs/mlflow.md#how-close-to-mlflow).
KNOWN_DIFFERENCES: dict[str, str] = {}
SAME_AT_LEAST = 0.95


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


def _battery(uri: str) -> dict[str, Any]:
    from mlflow import MlflowClient, set_tracking_uri

    set_tracking_uri(uri)  # the artifact and trace calls follow the global URI
    battery = Battery(MlflowClient(tracking_uri=uri))
    run_battery(battery)
    return battery.normalised()


def test_the_official_client_gets_mlflows_own_answers_from_our_endpoint(
    tracking: Callable[[str], str], tokens: dict[str, str], mlflow_server: str, tmp_path: Path
) -> None:
    ours = _battery(tracking(tokens["alice"]))
    theirs = _battery(mlflow_server)

    assert ours.keys() == theirs.keys()
    different = {name for name in theirs if ours[name] != theirs[name]}
    report = "\n".join(
        f"{name}:\n  ours   {ours[name]}\n  MLflow {theirs[name]}" for name in sorted(different)
    )
    (tmp_path / "differences.txt").write_text(report)
    print(f"battery: {len(theirs) - len(different)} of {len(theirs)} calls answer the same")
    print(report)
    assert different == set(KNOWN_DIFFERENCES), report
    assert len(theirs) - len(different) >= SAME_AT_LEAST * len(theirs)
