"""What the results benchmarks share: embedded Postgres on loopback, our web server under gunicorn,
an MLflow tracking server on the same Postgres, and a run with tokens to talk to them.

MLflow lives in its own virtual environment under var/bench/ (created on first use): its pins
(gunicorn < 27 among them) must not touch the product's environment, and it talks to us over
HTTP anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webapp.embedded import LOOPBACK, embedded_services, free_port  # noqa: E402

VAR = ROOT / "var" / "bench"
# 3.18.0 does not resolve on PyPI today (mlflow-skinny 3.18.0 is missing); 3.17 is the release
# docs/benchmarks.md#mlflow-tracking-server measured.
MLFLOW_VERSION = os.environ.get("BENCH_MLFLOW_VERSION", "3.17.2")
MLFLOW_VENV = VAR / f"mlflow-{MLFLOW_VERSION}"
WORKERS = int(os.environ.get("BENCH_WORKERS", "4"))


def ensure_mlflow() -> Path:
    mlflow = MLFLOW_VENV / "bin" / "mlflow"
    if mlflow.exists():
        return mlflow
    print(f"installing mlflow=={MLFLOW_VERSION} into {MLFLOW_VENV} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_VENV)], check=True)
    pip = [str(MLFLOW_VENV / "bin" / "pip"), "install", "--quiet"]
    subprocess.run([*pip, f"mlflow=={MLFLOW_VERSION}", "psycopg[binary]>=3.2"], check=True)
    return mlflow


@contextlib.contextmanager
def postgres(keep: Path | None = None) -> Iterator[str]:
    """A fresh embedded Postgres (default durability settings) on a free loopback port; with ``keep``,
    the one in that folder, left there afterwards (a bench reuses what it seeded)."""
    root = keep or VAR / f"pg-{os.getpid()}"
    with embedded_services(
        root, pg_port=free_port(), valkey_port=0, need_postgres=True, need_valkey=False
    ) as urls:
        yield urls["DATABASE_URL"]
    if keep is None:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def setup_django(database_url: str) -> None:
    os.environ.update(django_env(database_url))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def django_env(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        # Settings need a broker URL; nothing here sends a task.
        "REDIS_URL": f"redis://{LOOPBACK}:9/0",
        "STUDIO_VAR_DIR": str(VAR / "app"),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _wait_for(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f} s")


@contextlib.contextmanager
def studio_server(database_url: str) -> Iterator[Server]:
    """Our web tier as `make run` serves it (webapp/gunicorn_conf.py), with BENCH_WORKERS processes."""
    from webapp.supervisor import web_command

    port = free_port()
    argv = [*web_command(port, WORKERS), "--log-level", "warning", "--access-logfile", "/dev/null"]
    proc = subprocess.Popen(
        argv, cwd=ROOT, env={**os.environ, **django_env(database_url)}, start_new_session=True
    )
    server = Server(proc, f"http://{LOOPBACK}:{port}")
    try:
        _wait_for(server.url + "/api/openapi.json", proc, "our web server", 60)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def mlflow_server(database_url: str) -> Iterator[Server]:
    import psycopg

    mlflow = ensure_mlflow()
    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS mlflow")
        conn.execute("CREATE DATABASE mlflow")
    store = database_url.replace("postgres://", "postgresql+psycopg://").rsplit("/", 1)[0] + "/mlflow"
    artifacts = VAR / f"mlflow-artifacts-{os.getpid()}"
    port = free_port()
    proc = subprocess.Popen(
        [str(mlflow), "server", "--backend-store-uri", store, "--artifacts-destination", artifacts.as_uri(),
         "--host", LOOPBACK, "--port", str(port), "--workers", str(WORKERS)],
        cwd=VAR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    server = Server(proc, f"http://{LOOPBACK}:{port}")
    try:
        _wait_for(server.url + "/health", proc, "the MLflow server", 240)
        yield server
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(artifacts)], check=False)


# The claimant id the benches' runs are claimed with: ingestion takes only the claimant's calls.
BENCH_CLAIMANT = "bench-claimant"


def make_run() -> tuple[Any, str, str]:
    """(run, run token, personal API token) in a fresh team; the run is claimed by BENCH_CLAIMANT."""
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import ApiToken, Team
    from webapp.experiments.models import Experiment, Run

    user = get_user_model().objects.create_user(f"bench{time.time_ns()}", password=None)
    team = Team.create_with_owner(f"bench {time.time_ns()}", user)
    experiment = Experiment.objects.create(team=team, name="bench", task="bench", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=team, seed=0)
    _token, personal = ApiToken.issue(user, "bench")
    token = run.issue_token()
    run.enqueue()
    run.claim("bench:0", BENCH_CLAIMANT)
    return run, token, personal


def mlflow_run(server: Server) -> str:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        experiment = client.post(
            "/api/2.0/mlflow/experiments/create", json={"name": f"bench-{time.time_ns()}"}
        )
        experiment.raise_for_status()
        created = client.post(
            "/api/2.0/mlflow/runs/create",
            json={"experiment_id": experiment.json()["experiment_id"], "start_time": int(time.time() * 1000)},
        )
        created.raise_for_status()
        return str(created.json()["run"]["info"]["run_id"])


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def timed_page(client: httpx.Client, url: str, must_contain: str, requests: int) -> tuple[float, int]:
    """p50 server time of a page over ``requests`` GETs and its size; the first GET warms up and
    checks that the page is the one meant."""
    first = client.get(url)
    if first.status_code != 200 or must_contain not in first.text:
        raise RuntimeError(f"{url}: HTTP {first.status_code}, {must_contain!r} missing")
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        client.get(url).raise_for_status()
        samples.append(time.perf_counter() - started)
    return p50(samples), len(first.content)


def load_average() -> str:
    """The 1-minute load average, printed beside each figure: on a shared machine it says what the
    figure was measured under."""
    return f"load {os.getloadavg()[0]:.1f}"


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"
