"""The reaper's cost per 1,000 active runs (docs/scaling.md#the-reaper).

BENCH_RUNS running local runs (1,000 by default) in one team on an embedded Postgres, each with a
recent heartbeat and the process group of this bench as its executor ref, so every one is alive
and stays running: one reaper step (webapp.experiments.tasks.reap_runs, called here as beat's
worker calls it) then asks the executor about each run and changes nothing. Measured: wall time and
this process's CPU time for one step over BENCH_ROUNDS steps, and the SQL queries one step sends.
The peer: the same step over the same runs with the executor's answer taken as given (the
database's part alone), its steps interleaved with ours. Prints both with their spread, their ratio
and the load average; no pass/fail.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any
from unittest import mock

from _common import load_average, make_run, postgres, setup_django

RUNS = int(os.environ.get("BENCH_RUNS", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def seed_runs() -> None:
    """RUNS running local runs beside make_run's one, each claimed, with this bench's group as ref."""
    from django.utils import timezone

    from webapp.experiments.models import Run, RunStatus

    first, _token, _personal = make_run()
    now = timezone.now()
    Run.objects.bulk_create(
        Run(
            experiment=first.experiment, team=first.team, seed=seed, executor="local",
            executor_ref=f"pgid:{os.getpgid(0)}", status=RunStatus.RUNNING, claimant=f"bench-{seed}",
            started_at=now, starting_at=now, heartbeat_at=now, progress_at=now,
        )
        for seed in range(1, RUNS)
    )  # fmt: skip
    Run.objects.filter(pk=first.pk).update(executor_ref=f"pgid:{os.getpgid(0)}")


def one_step() -> tuple[float, float, int]:
    """(wall s, CPU s, SQL queries) of one reaper step."""
    from django.db import connection

    from webapp.experiments.tasks import reap_runs

    queries = 0

    def count(execute: Any, *args: Any) -> Any:
        nonlocal queries
        queries += 1
        return execute(*args)

    cpu, wall = time.process_time(), time.perf_counter()
    with connection.execute_wrapper(count):
        reap_runs()
    return time.perf_counter() - wall, time.process_time() - cpu, queries


def _line(label: str, steps: list[tuple[float, float, int]]) -> str:
    per_thousand = 1000 / RUNS
    walls = [wall * per_thousand for wall, _, _ in steps]
    cpu = sum(step[1] for step in steps) / len(steps) * per_thousand
    return (
        f"{label}: {statistics.median(walls):.2f} s wall (spread {min(walls):.2f}-{max(walls):.2f}), "
        f"{cpu:.2f} s CPU, {steps[-1][2] * per_thousand:.0f} queries per 1,000 runs per step"
    )


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        from webapp.experiments.executors import ExecutorState, LocalExecutor
        from webapp.experiments.models import Run, RunStatus

        seed_runs()
        asked: list[tuple[float, float, int]] = []
        given: list[tuple[float, float, int]] = []
        for _ in range(ROUNDS):  # the two sides interleaved, so a change of load hits both
            asked.append(one_step())
            with mock.patch.object(LocalExecutor, "poll", return_value=ExecutorState(alive=True)):
                given.append(one_step())
        assert Run.objects.filter(status=RunStatus.RUNNING).count() == RUNS  # nothing changed
        print(_line("reaper step, local executor asked", asked))
        print(_line("peer: the same step, the executor's answer given (the database's part)", given))
        wall = statistics.median(step[0] for step in asked) / statistics.median(step[0] for step in given)
        print(
            f"local executor / database's part: {wall:.2f}x wall ({RUNS} runs, {ROUNDS} rounds, {load_average()})"
        )


if __name__ == "__main__":
    main()
