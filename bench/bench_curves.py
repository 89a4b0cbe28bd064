"""p50 latency of one curve with 1,000,000 points: our downsampled curve endpoint vs MLflow's.

The same series (1M steps, a slow wave with noise, one spike up and one down) is written with SQL
generate_series into our point table (then its min/max summaries are built) and into MLflow's
own metrics table, on the same embedded Postgres. Then, over HTTP on loopback:
- ours: GET /api/t/{team}/runs/{id}/metrics/curve?key=... (at most ~1,000 points, each a bucket's
  minimum or maximum), personal API token;
- MLflow: GET /api/2.0/mlflow/metrics/get-history-bulk-interval (max_results=1000, what its UI
  draws: evenly spaced samples, so spikes between samples are lost).
Goal (issue 6): p50 <= 50 ms and faster than MLflow. Prints figures and ratios; no pass/fail.
"""

from __future__ import annotations

import os
import time

import httpx
from _common import make_run, mlflow_run, mlflow_server, p50, postgres, ratio, setup_django, studio_server

POINTS = 1_000_000
KEY = "reward/mean"
OUR_REQUESTS = int(os.environ.get("BENCH_CURVE_REQUESTS", "50"))
MLFLOW_REQUESTS = int(os.environ.get("BENCH_MLFLOW_REQUESTS", "10"))
SPIKE_UP, SPIKE_DOWN = 123_457, 876_543
# The wave, noise and two spikes, as a SQL expression of s (the step); deterministic.
VALUE_SQL = (
    "CASE WHEN s = %(up)s THEN 10.0 WHEN s = %(down)s THEN -10.0 "
    "ELSE sin(s / 5000.0) + ((s::bigint * 7919) %% 1000) / 10000.0 END"
)


def load_ours(run_id: int) -> None:
    from django.db import connection

    from webapp.ingestion.metrics_store import key_ids, rebuild_summaries

    key_id = key_ids([KEY])[KEY]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO results_metricpoint (run_id, key_id, step, value, ts) "
            f"SELECT %(run)s, %(key)s, s, {VALUE_SQL}, 1.7e9 + s FROM generate_series(0, %(n)s - 1) AS s",
            {"run": run_id, "key": key_id, "n": POINTS, "up": SPIKE_UP, "down": SPIKE_DOWN},
        )
    rebuild_summaries(run_id)


def load_mlflow(database_url: str, run_uuid: str) -> None:
    import psycopg

    with psycopg.connect(database_url.rsplit("/", 1)[0] + "/mlflow") as conn:
        conn.execute(
            f"INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            f"SELECT %(key)s, {VALUE_SQL}, 1700000000000 + s, %(run)s, s, false FROM generate_series(0, %(n)s - 1) AS s",
            {"key": KEY, "run": run_uuid, "n": POINTS, "up": SPIKE_UP, "down": SPIKE_DOWN},
        )
        conn.execute(
            "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) "
            "VALUES (%s, 0, 1700000000000 + %s, %s, false, %s)",
            (KEY, POINTS - 1, POINTS - 1, run_uuid),
        )
        conn.execute("ANALYZE metrics")


def time_requests(
    client: httpx.Client, url: str, params: dict[str, str], count: int
) -> tuple[list[float], dict]:
    client.get(url, params=params).raise_for_status()  # warm-up
    samples, body = [], {}
    for _ in range(count):
        started = time.perf_counter()
        response = client.get(url, params=params)
        samples.append(time.perf_counter() - started)
        response.raise_for_status()
        body = response.json()
    return samples, body


def bench_ours(database_url: str) -> float:
    from webapp.ingestion.metrics_store import downsample

    run, _run_token, personal = make_run()
    load_ours(run.pk)
    in_process = []
    for _ in range(20):
        started = time.perf_counter()
        series = downsample(run.pk, KEY)
        in_process.append(time.perf_counter() - started)
    with (
        studio_server(database_url) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {personal}"}, timeout=60
        ) as client,
    ):
        url = f"/api/t/{run.team.slug}/runs/{run.pk}/metrics/curve"
        samples, body = time_requests(client, url, {"key": KEY}, OUR_REQUESTS)
    returned = body["series"][0]
    has_extremes = 10.0 in returned["value"] and -10.0 in returned["value"]
    print(f"ours: {len(returned['value'])} points ({returned['source']}), spikes kept: {has_extremes}; "
          f"SQL alone p50 {p50(in_process) * 1000:.1f} ms ({len(series.value)} points)")  # fmt: skip
    return p50(samples)


def bench_mlflow(database_url: str) -> float:
    with mlflow_server(database_url) as server, httpx.Client(base_url=server.url, timeout=300) as client:
        run_uuid = mlflow_run(server)
        load_mlflow(database_url, run_uuid)
        params = {"run_ids": run_uuid, "metric_key": KEY, "max_results": "1000"}
        samples, body = time_requests(
            client, "/api/2.0/mlflow/metrics/get-history-bulk-interval", params, MLFLOW_REQUESTS
        )
    values = [m["value"] for m in body.get("metrics", [])]
    print(f"MLflow: {len(values)} points, spikes kept: {10.0 in values and -10.0 in values}")
    return p50(samples)


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        ours = bench_ours(database_url)
        print(f"ours   p50 {ours * 1000:8.1f} ms  (goal <= 50 ms)", flush=True)
        mlflow = bench_mlflow(database_url)
        print(f"MLflow p50 {mlflow * 1000:8.1f} ms", flush=True)
    print(f"MLflow p50 / ours p50: {ratio(mlflow, ours)} (ours is that many times faster)")


if __name__ == "__main__":
    main()
