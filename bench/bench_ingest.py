"""Metric points per second into Postgres: our ingestion API vs an MLflow tracking server vs raw COPY.

All three write to the same embedded Postgres on this machine, in the same run:
- ours: gzipped MetricBatch bodies of 10,000 points posted to trainer.contract.METRICS_PATH
  (the product's gunicorn settings, BENCH_WORKERS workers, two client threads), the way trainer.report.http.HttpReporter does;
- MLflow: REST runs/log-batch with 1,000 metrics per call (its limit), two client threads;
- raw COPY: psycopg binary COPY of (run, key, step, value, ts) rows in batches of 10,000 into a table
  keyed on (run_id, key, step), no server in between: the limit.
Bodies are built before the clock starts, so the figures are the servers', not the clients'.
Goals (issue 6): >= 20x MLflow and >= 0.3x raw COPY. Prints figures and ratios; no pass/fail.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from _common import (
    BENCH_CLAIMANT,
    make_run,
    mlflow_run,
    mlflow_server,
    postgres,
    ratio,
    setup_django,
    studio_server,
)

from trainer.contract import CLAIMANT_HEADER, METRICS_PATH

KEYS = [f"bench/k{i:02d}" for i in range(20)]
OUR_BATCHES = int(os.environ.get("BENCH_OUR_BATCHES", "100"))  # x 10,000 points
MLFLOW_CALLS = int(os.environ.get("BENCH_MLFLOW_CALLS", "100"))  # x 1,000 points
COPY_BATCHES = int(os.environ.get("BENCH_COPY_BATCHES", "100"))  # x 10,000 rows
CLIENTS = 2


def our_bodies() -> list[bytes]:
    bodies = []
    for batch in range(OUR_BATCHES):
        points = [
            {"key": key, "step": step, "value": (step % 97) * 0.01 + i, "ts": 1.7e9 + step}
            for step in range(batch * 500, (batch + 1) * 500)
            for i, key in enumerate(KEYS)
        ]
        bodies.append(gzip.compress(json.dumps({"batch_id": f"b{batch}", "points": points}).encode(), 6))
    return bodies


def gzip_ingest_headers(run_token: str) -> dict[str, str]:
    """The headers of a gzipped ingestion body from the benches' claimed run, as HttpReporter sends them."""
    return {
        "Authorization": f"Bearer {run_token}",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        CLAIMANT_HEADER: BENCH_CLAIMANT,
    }


def post_all(url: str, bodies: list[bytes], headers: dict[str, str]) -> float:
    def send(chunk: list[bytes]) -> None:
        with httpx.Client(timeout=120) as client:
            for body in chunk:
                response = client.post(url, content=body, headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")

    chunks = [bodies[i::CLIENTS] for i in range(CLIENTS)]
    started = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(send, chunks))
    return time.perf_counter() - started


def bench_ours(database_url: str) -> float:
    run, run_token, _ = make_run()
    bodies = our_bodies()
    headers = gzip_ingest_headers(run_token)
    with studio_server(database_url) as server:
        url = server.url + METRICS_PATH.format(run_id=run.pk)
        post_all(url, bodies[:2], headers)  # warm up: connections, the key cache of each worker
        seconds = post_all(url, bodies[2:], headers)
    from webapp.ingestion.models import MetricPoint

    stored = MetricPoint.objects.filter(run=run).count()
    if stored != len(bodies) * 10_000:
        raise RuntimeError(f"expected {len(bodies) * 10_000} points stored, found {stored}")
    return (len(bodies) - 2) * 10_000 / seconds


def bench_mlflow(database_url: str) -> float:
    with mlflow_server(database_url) as server:
        run_id = mlflow_run(server)
        bodies = []
        for call in range(MLFLOW_CALLS):
            metrics = [
                {
                    "key": key,
                    "value": (step % 97) * 0.01 + i,
                    "timestamp": 1_700_000_000_000 + step,
                    "step": step,
                }
                for step in range(call * 50, (call + 1) * 50)
                for i, key in enumerate(KEYS)
            ]
            bodies.append(json.dumps({"run_id": run_id, "metrics": metrics}).encode())
        url = f"{server.url}/api/2.0/mlflow/runs/log-batch"
        headers = {"Content-Type": "application/json"}
        post_all(url, bodies[:4], headers)
        seconds = post_all(url, bodies[4:], headers)
    return (len(bodies) - 4) * 1_000 / seconds


def bench_copy(database_url: str) -> float:
    import psycopg

    rows = [
        [(1, key, step, (step % 97) * 0.01 + i, 1.7e9 + step) for step in range(b * 500, (b + 1) * 500)
         for i, key in enumerate(KEYS)]
        for b in range(COPY_BATCHES)
    ]  # fmt: skip
    with psycopg.connect(database_url) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw")
        conn.execute(
            "CREATE TABLE bench_raw (run_id bigint, key text, step int, value float8, ts float8, "
            "PRIMARY KEY (run_id, key, step))"
        )
        conn.commit()
        started = time.perf_counter()
        for batch in rows:
            with conn.cursor() as cursor, cursor.copy("COPY bench_raw FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", "int4", "float8", "float8"])
                for row in batch:
                    copy.write_row(row)
            conn.commit()
        seconds = time.perf_counter() - started
        conn.execute("DROP TABLE bench_raw")
    return COPY_BATCHES * 10_000 / seconds


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        copy = bench_copy(database_url)
        print(f"raw COPY (psycopg binary, 10k rows per batch):   {copy:>10,.0f} points/s", flush=True)
        ours = bench_ours(database_url)
        print(f"ours (HTTP, gzip MetricBatch of 10k points):     {ours:>10,.0f} points/s", flush=True)
        mlflow = bench_mlflow(database_url)
        print(f"MLflow log-batch (REST, 1k metrics per call):    {mlflow:>10,.0f} points/s", flush=True)
    print(f"ours / MLflow:   {ratio(ours, mlflow)}   (goal >= 20x)")
    print(f"ours / raw COPY: {ratio(ours, copy)}   (goal >= 0.3x)")


if __name__ == "__main__":
    main()
