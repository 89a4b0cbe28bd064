"""The rollout tables are partitioned by run, and a run's queries read its partition alone
(docs/rollouts.md#partitioning)."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection

from tests.webapp.trainer_posts import Trainer, trajectory
from webapp.ingestion.models import ToolCall, Trajectory, TrajectoryStep
from webapp.rollouts.viewer import RolloutFilter


def _partitions_read(plan: str) -> set[str]:
    return set(re.findall(r" on (results_[a-z]+_p\d+)", plan))


def test_the_rollout_tables_are_partitioned_by_run_and_a_runs_rollouts_read_one_partition(
    trainer: Trainer, run: Any
) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, p.partstrat FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
            "WHERE c.relname LIKE 'results_%%'"
        )
        assert dict(cursor.fetchall()) == {
            "results_trajectory": "h", "results_trajectorystep": "h", "results_toolcall": "h",
        }  # fmt: skip
    assert trainer.trajectories(0, [trajectory("s0-p0-s0", "s0-p0", 1.0)]).status_code == 200
    step = TrajectoryStep.objects.get(trajectory__uid="s0-p0-s0", index=1)
    assert step.run_id == run.pk and ToolCall.objects.get().run_id == run.pk
    listed = RolloutFilter().apply(Trajectory.objects.filter(run=run)).order_by("-training_step", "id")[:50]
    assert len(_partitions_read(listed.explain())) == 1
    assert len(_partitions_read(TrajectoryStep.objects.filter(run=run).explain())) == 1
