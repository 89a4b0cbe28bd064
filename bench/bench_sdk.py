"""The SDK's log() against the raw ingestion route, in the same run (docs/sdk.md#throughput).

- raw: ready-made gzipped MetricBatch bodies of 10,000 points posted one after another to
  trainer.contract.METRICS_PATH by one client (the bodies are built before the clock starts);
- SDK: one process calls ``run.log`` with 10 keys a step until BENCH_SDK_POINTS points are logged;
  the clock runs from the first log until the server has stored them all. Both sides post to the same server, alternately, BENCH_SDK_ROUNDS times
  each; the best round of each side is compared (goal: SDK >= 0.8x raw).
- memory: a child process logs BENCH_SDK_RSS_POINTS points with the server down (nothing listens on
  its port, so the run is spooled to its folder); the growth of its RSS over the logging is printed
  (goal: under 100 MB for 1,000,000 points).

BENCH_SDK_POINTS defaults to 200,000 on a shared machine; set it to 1000000 for the full size.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _common import ROOT, make_run, postgres, ratio, setup_django, studio_server

from trainer.contract import METRICS_PATH

POINTS = int(os.environ.get("BENCH_SDK_POINTS", "200000"))
RSS_POINTS = int(os.environ.get("BENCH_SDK_RSS_POINTS", "1000000"))
ROUNDS = int(os.environ.get("BENCH_SDK_ROUNDS", "2"))
KEYS = [f"bench/k{i}" for i in range(10)]
BATCH = 10_000


def raw_bodies() -> list[bytes]:
    steps_per_body = BATCH // len(KEYS)
    bodies = []
    for body in range(POINTS // BATCH):
        points = [
            {"key": key, "step": step, "value": step * 0.01 + i, "ts": 1.7e9 + step}
            for step in range(body * steps_per_body, (body + 1) * steps_per_body)
            for i, key in enumerate(KEYS)
        ]
        bodies.append(gzip.compress(json.dumps({"batch_id": f"b{body}", "points": points}).encode(), 1))
    return bodies


def bench_raw(url: str) -> float:
    from bench_ingest import gzip_ingest_headers

    run, run_token, _ = make_run()
    bodies = raw_bodies()
    headers = gzip_ingest_headers(run_token)
    with httpx.Client(timeout=120) as client:
        started = time.perf_counter()
        for body in bodies:
            client.post(
                url + METRICS_PATH.format(run_id=run.pk), content=body, headers=headers
            ).raise_for_status()
        seconds = time.perf_counter() - started
    return len(bodies) * BATCH / seconds


def bench_sdk(url: str, round_: int) -> float:
    from trainer.studio import sdk

    run, _, personal = make_run()
    os.environ.update({"STUDIO_URL": url, "STUDIO_TOKEN": personal, "STUDIO_TEAM": run.team.slug})
    with tempfile.TemporaryDirectory() as folder:
        logged = sdk.init(project="bench sdk", name=f"sdk {round_}", dir=folder)
        if logged.offline:
            raise RuntimeError("the SDK could not open its run")
        started = time.perf_counter()
        for step in range(POINTS // len(KEYS)):
            logged.log({key: step * 0.01 + i for i, key in enumerate(KEYS)})
        # The clock stops when the server holds every point (the last batch waits at most a second).
        while stored_points(f"sdk {round_}") < POINTS // len(KEYS) * len(KEYS):
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        # The bench's server has no broker: the run's end (which queues a task) is not measured.
        os.environ["STUDIO_FINISH_TIMEOUT"] = "1"
        logged.finish(quiet=True)
    return POINTS // len(KEYS) * len(KEYS) / seconds


def stored_points(run_name: str) -> int:
    from webapp.ingestion.models import MetricPoint

    return MetricPoint.objects.filter(run__name=run_name).count()


def rss_while_down() -> None:
    """The child: log RSS_POINTS points to a server that is not there; print the RSS growth (MB)."""
    import psutil

    from trainer.studio import sdk

    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update({"STUDIO_URL": f"http://127.0.0.1:{port}", "STUDIO_TOKEN": "sk_x", "STUDIO_TEAM": "t"})
    with tempfile.TemporaryDirectory() as folder:
        logged = sdk.init(project="bench sdk", dir=folder)
        before = psutil.Process().memory_info().rss
        peak = before
        for step in range(RSS_POINTS // len(KEYS)):
            logged.log({key: step * 0.01 + i for i, key in enumerate(KEYS)})
            if step % 10_000 == 0:
                peak = max(peak, psutil.Process().memory_info().rss)
        logged.finish(quiet=True)
        peak = max(peak, psutil.Process().memory_info().rss)
        spooled = sum(p.stat().st_size for p in Path(folder).rglob("*.json.gz"))
    print(
        json.dumps(
            {"growth_mb": (peak - before) / 2**20, "offline": logged.offline, "spool_mb": spooled / 2**20}
        )
    )


def main() -> None:
    raw: list[float] = []
    ours: list[float] = []
    with postgres() as database_url:
        setup_django(database_url)
        with studio_server(database_url) as server:
            bench_raw(server.url)  # warm up: connections, each worker's key cache
            for round_ in range(ROUNDS):  # interleaved, so a change of load hits both sides
                raw.append(bench_raw(server.url))
                ours.append(bench_sdk(server.url, round_))
                print(
                    f"round {round_}: raw {raw[-1]:>10,.0f} points/s   SDK {ours[-1]:>10,.0f} points/s",
                    flush=True,
                )
    print(f"raw ingestion route (one client, 10k-point bodies): {max(raw):>10,.0f} points/s")
    print(f"SDK log() of {POINTS:,} points, to stored:          {max(ours):>10,.0f} points/s")
    print(f"SDK / raw: {ratio(max(ours), max(raw))}   (goal >= 0.8x)")
    child = subprocess.run(
        [sys.executable, __file__, "--rss"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    memory = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        f"RSS growth logging {RSS_POINTS:,} points with the server down: {memory['growth_mb']:.1f} MB "
        f"(goal < 100 MB; offline: {memory['offline']}, spooled {memory['spool_mb']:.1f} MB on disk)"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--rss"]:
        rss_while_down()
    else:
        main()
