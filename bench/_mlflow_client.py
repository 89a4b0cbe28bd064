"""The one MLflow-client script both tracking servers are measured with (bench_mlflow_endpoint).

Runs in the MLflow bench venv's Python, so the client is the same package against both servers:
MLFLOW_TRACKING_URI / MLFLOW_TRACKING_TOKEN pick the server. Creates an experiment and a run,
logs CALLS x 1,000 metrics with MlflowClient.log_batch (20 keys x 50 steps per call), ends the run,
and prints {"points", "seconds", "run_id"} as JSON. Metric objects are built before the clock starts.
"""

from __future__ import annotations

import json
import sys
import time

from mlflow import MlflowClient
from mlflow.entities import Metric

KEYS = [f"bench/k{i:02d}" for i in range(20)]
STEPS_PER_CALL = 50


def main(calls: int) -> None:
    client = MlflowClient()
    experiment_id = client.create_experiment(f"bench-mlflow-{time.time_ns()}")
    run_id = client.create_run(experiment_id, run_name="bench").info.run_id
    batches = [
        [Metric(key, (step % 97) * 0.01 + i, 1_700_000_000_000 + step, step)
         for step in range(call * STEPS_PER_CALL, (call + 1) * STEPS_PER_CALL) for i, key in enumerate(KEYS)]
        for call in range(calls)
    ]  # fmt: skip
    client.log_batch(run_id, metrics=batches[0])  # warm up: connection, the server's caches
    started = time.perf_counter()
    for batch in batches[1:]:
        client.log_batch(run_id, metrics=batch)
    seconds = time.perf_counter() - started
    client.set_terminated(run_id)
    print(json.dumps({"points": sum(map(len, batches[1:])), "seconds": seconds, "run_id": run_id}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
