"""Ingestion under many trainers at once: 10 and 50 concurrent trainers, each offering
BENCH_TRAINER_RATE metric points per second for BENCH_SECONDS, against our web tier as `make run`
serves it (webapp/gunicorn_conf.py, BENCH_WORKERS processes) on an embedded Postgres.

Each trainer is a thread with its own keep-alive connection that does what
trainer.report.http.HttpReporter does: once a second it posts a gzipped MetricBatch of the points
logged since the last one, with a batch_id, its run's token and claimant id, and retries a failed
post with the same batch_id (5xx, 429, connection errors) until it is stored. Bodies are built before
the clock starts. Figures per level: points/s stored (what was stored over the offering period, or
over the time from the first post to the last answer when that is longer), p50/p99 latency of a post, lost (offered - stored) and
duplicated (points the server answered "stored" beyond those in the table, or values that differ).

Peer, in the same run: raw psycopg binary COPY of the same rows from the same number of concurrent
connections into a table keyed like ours, no server in between (the limit of this Postgres and
machine). Prints figures and ratios; no pass/fail. The issue's goal: 50 trainers x 1,000 points/s
stored as offered (at 50 the earlier web tier stored about 32.6k of 50k points/s).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx
from _common import BENCH_CLAIMANT, make_run, postgres, ratio, setup_django, studio_server

from trainer.contract import CLAIMANT_HEADER, IDEMPOTENCY_HEADER, METRICS_PATH

LEVELS = [int(n) for n in os.environ.get("BENCH_TRAINERS", "10,50").split(",")]
RATE = int(os.environ.get("BENCH_TRAINER_RATE", "1000"))  # points per second per trainer
SECONDS = int(os.environ.get("BENCH_SECONDS", "20"))
KEYS = [f"bench/k{i:02d}" for i in range(20)]  # a step logs one point per key
STEPS_PER_BATCH = max(1, RATE // len(KEYS))  # one batch a second, like the reporter's flush


def batch_points(second: int) -> list[dict[str, float | int | str]]:
    first = second * STEPS_PER_BATCH
    return [
        {"key": key, "step": step, "value": step * 0.001 + i, "ts": 1.7e9 + step}
        for step in range(first, first + STEPS_PER_BATCH)
        for i, key in enumerate(KEYS)
    ]


def expected_sum() -> float:
    return sum(float(p["value"]) for second in range(SECONDS) for p in batch_points(second))


@dataclass
class Trainer:
    run_id: int
    token: str
    bodies: list[tuple[str, bytes]]  # (batch_id, gzipped body), one per second
    latencies: list[float] = field(default_factory=list)
    answered_stored: int = 0
    retries: int = 0
    error: str = ""

    def send(self, url: str, start_at: float) -> None:
        headers = {"Authorization": f"Bearer {self.token}", CLAIMANT_HEADER: BENCH_CLAIMANT,
                   "Content-Type": "application/json", "Content-Encoding": "gzip"}  # fmt: skip
        with httpx.Client(timeout=120) as client:
            for second, (batch_id, body) in enumerate(self.bodies):
                # The reporter flushes once a second; a slow answer delays the next batch, as there.
                time.sleep(max(0.0, start_at + second - time.perf_counter()))
                self._post(client, url, {**headers, IDEMPOTENCY_HEADER: batch_id}, body)

    def _post(self, client: httpx.Client, url: str, headers: dict[str, str], body: bytes) -> None:
        for attempt in range(50):
            began = time.perf_counter()
            try:
                response = client.post(url, content=body, headers=headers)
            except httpx.HTTPError:
                response = None
            self.latencies.append(time.perf_counter() - began)
            if response is not None and response.status_code == 200:
                self.answered_stored += int(response.json()["stored"])
                return
            if response is not None and response.status_code < 500 and response.status_code != 429:
                self.error = f"HTTP {response.status_code}: {response.text[:200]}"
                return
            self.retries += 1
            time.sleep(min(0.5 * 2**attempt, 5.0))
        self.error = "gave up after 50 tries"


@dataclass
class Figures:
    stored_per_s: float
    p50_s: float
    p99_s: float
    offered: int
    lost: int
    duplicated: int
    retries: int


def make_trainers(count: int) -> list[Trainer]:
    trainers = []
    for _ in range(count):
        run, token, _personal = make_run()
        bodies = [
            (f"r{run.pk}-s{second}",
             gzip.compress(json.dumps({"batch_id": f"r{run.pk}-s{second}", "points": batch_points(second)}).encode(), 6))
            for second in range(SECONDS)
        ]  # fmt: skip
        trainers.append(Trainer(run.pk, token, bodies))
    return trainers


def bench_trainers(server_url: str, count: int) -> Figures:
    from django.db import connection

    trainers = make_trainers(count)
    start_at = time.perf_counter() + 1.0  # every thread ready before the first post
    threads = [
        threading.Thread(target=t.send, args=(server_url + METRICS_PATH.format(run_id=t.run_id), start_at))
        for t in trainers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The trainers offer for SECONDS; a server that keeps up has stored everything by then, one that
    # falls behind takes longer, and its rate is what it stored over the time it took.
    seconds = max(float(SECONDS), time.perf_counter() - start_at)
    errors = [t.error for t in trainers if t.error]
    if errors:
        raise RuntimeError(f"{len(errors)} trainers failed; the first: {errors[0]}")
    run_ids = [t.run_id for t in trainers]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT run_id, count(*), sum(value) FROM results_metricpoint WHERE run_id = ANY(%s) GROUP BY run_id",
            [run_ids],
        )
        rows = {run_id: (n, total) for run_id, n, total in cursor.fetchall()}
    per_run = SECONDS * STEPS_PER_BATCH * len(KEYS)
    stored = sum(n for n, _ in rows.values())
    wrong_values = sum(
        1 for n, total in rows.values() if n == per_run and abs(total - expected_sum()) > 1e-6 * per_run
    )
    latencies = sorted(x for t in trainers for x in t.latencies)
    return Figures(
        stored_per_s=stored / seconds,
        p50_s=statistics.median(latencies),
        p99_s=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        offered=per_run * count,
        lost=per_run * count - stored,
        duplicated=max(0, sum(t.answered_stored for t in trainers) - stored) + wrong_values,
        retries=sum(t.retries for t in trainers),
    )


def bench_copy(database_url: str, count: int) -> float:
    """The same rows as ``count`` trainers offer, COPYed by ``count`` connections at once, flat out."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw")
        conn.execute("CREATE TABLE bench_raw (run_id bigint, key text, step int, value float8, ts float8, "
                     "PRIMARY KEY (run_id, key, step))")  # fmt: skip
    rows = [[(p["key"], p["step"], p["value"], p["ts"]) for p in batch_points(s)] for s in range(SECONDS)]

    def copy_all(run_id: int, barrier: threading.Barrier) -> None:
        try:
            conn = psycopg.connect(database_url)
        except psycopg.Error:
            barrier.abort()  # the others, and main, stop waiting for this connection
            raise
        with conn:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                return  # another connection failed; main says so
            for batch in rows:
                with (
                    conn.cursor() as cursor,
                    cursor.copy("COPY bench_raw FROM STDIN (FORMAT BINARY)") as copy,
                ):
                    copy.set_types(["int8", "text", "int4", "float8", "float8"])
                    for key, step, value, ts in batch:
                        copy.write_row((run_id, key, step, value, ts))
                conn.commit()

    barrier = threading.Barrier(count + 1)
    threads = [threading.Thread(target=copy_all, args=(i, barrier)) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        raise RuntimeError(
            f"the COPY peer could not open {count} connections beside the web tier's (Postgres' max_connections)"
        ) from None
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE bench_raw")
    return count * SECONDS * STEPS_PER_BATCH * len(KEYS) / seconds


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    print(f"{RATE} points/s offered per trainer for {SECONDS} s; levels {LEVELS}", flush=True)
    with postgres() as database_url:
        setup_django(database_url)
        results: dict[int, Figures] = {}
        with studio_server(database_url) as server:
            for count in LEVELS:
                figures = bench_trainers(server.url, count)
                results[count] = figures
                print(
                    f"ours, {count:>3} trainers: {figures.stored_per_s:>9,.0f} of {count * RATE:>7,} points/s stored; "
                    f"p50 {figures.p50_s * 1000:.0f} ms, p99 {figures.p99_s * 1000:.0f} ms; "
                    f"offered {figures.offered:,}, lost {figures.lost}, duplicated {figures.duplicated}, "
                    f"retried posts {figures.retries}",
                    flush=True,
                )
        for count in LEVELS:
            copy = bench_copy(database_url, count)
            figures = results[count]
            print(f"raw COPY, {count:>3} connections, flat out: {copy:>9,.0f} points/s; "
                  f"ours (paced) / raw COPY: {ratio(figures.stored_per_s, copy)}", flush=True)  # fmt: skip
    for count in LEVELS:
        figures = results[count]
        print(
            f"{count} trainers: stored / offered = {ratio(figures.stored_per_s, count * RATE)} (goal 1.00x)"
        )


if __name__ == "__main__":
    main()
