"""The same MLflow-client script against our /mlflow/ endpoint and a real MLflow tracking server.

Both servers run BENCH_WORKERS workers on the same embedded Postgres, in this one run; the script
(bench/_mlflow_client.py) runs in the MLflow bench venv's Python, so the client is identical. It
logs 100,000 points with MlflowClient.log_batch at 1,000 metrics per call (MLflow's limit), one
client, calls one after another. Goal (issue 8): ours / MLflow >= 5x. Prints figures; no pass/fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from _common import (
    MLFLOW_VENV,
    ROOT,
    ensure_mlflow,
    make_run,
    mlflow_server,
    postgres,
    ratio,
    setup_django,
    studio_server,
)

CALLS = int(os.environ.get("BENCH_MLFLOW_CALLS", "101"))  # the first is a warm-up: 100 x 1,000 timed


def run_client(tracking_uri: str, token: str | None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update({"MLFLOW_TRACKING_URI": tracking_uri, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    if token:
        env["MLFLOW_TRACKING_TOKEN"] = token
    python = str(MLFLOW_VENV / "bin" / "python")
    done = subprocess.run(
        [python, str(ROOT / "bench" / "_mlflow_client.py"), str(CALLS)],
        env=env, capture_output=True, text=True, check=False, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the MLflow client failed against {tracking_uri}:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench_ours(database_url: str) -> float:
    from webapp.experiments.models import Run
    from webapp.ingestion.models import MetricPoint

    _run, _run_token, personal = make_run()
    with studio_server(database_url) as server:
        result = run_client(f"{server.url}/mlflow", personal)
    run = Run.objects.get(mlflow_run_id=result["run_id"])
    stored = MetricPoint.objects.filter(run=run).count()
    if stored != CALLS * 1000 or run.status != "succeeded":
        raise RuntimeError(f"expected {CALLS * 1000} points on a finished run, found {stored} ({run.status})")
    return float(result["points"] / result["seconds"])


def bench_mlflow(database_url: str) -> float:
    with mlflow_server(database_url) as server:
        result = run_client(server.url, None)
    return float(result["points"] / result["seconds"])


def main() -> None:
    ensure_mlflow()
    with postgres() as database_url:
        setup_django(database_url)
        started = time.monotonic()
        ours = bench_ours(database_url)
        print(
            f"ours   (/mlflow/, MlflowClient.log_batch, 1k metrics per call): {ours:>9,.0f} points/s",
            flush=True,
        )
        mlflow = bench_mlflow(database_url)
        print(
            f"MLflow (tracking server, same client script):                {mlflow:>9,.0f} points/s",
            flush=True,
        )
    print(f"ours / MLflow: {ratio(ours, mlflow)}   (goal >= 5x; {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
