"""What a resumed run's earlier attempt stored after the checkpoint it continues from: superseded by
what the new attempt reports for the same steps, so it is deleted when the resume is asked for, in the
resume's transaction (docs/resume.md#superseded). The curve then has one point per step, the new
attempt's, and the rollout viewer one set of trajectories."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from webapp.ingestion.metrics_store import rebuild_summaries
from webapp.ingestion.models import Checkpoint, PendingTokenSignals
from webapp.ingestion.storage import delete_trajectories_after


@dataclass(frozen=True)
class Superseded:
    points: int
    checkpoints: int


def supersede_after(run_id: int, step: int) -> Superseded:
    """Delete the run's metric points, trajectories (with their steps and tool calls), waiting token
    signals and checkpoint rows of steps after ``step``, and recompute its curve summaries. Call it
    inside the transaction that reopens the run, so nothing of the new attempt is written before."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM results_metricpoint WHERE run_id = %s AND step > %s", [run_id, step])
        points = cursor.rowcount
    # The summaries and latest values folded the deleted points in: they are rebuilt from what is left.
    rebuild_summaries(run_id)
    delete_trajectories_after(run_id, step)
    PendingTokenSignals.objects.filter(run_id=run_id, training_step__gt=step).delete()
    checkpoints, _ = Checkpoint.objects.filter(run_id=run_id, step__gt=step).delete()
    return Superseded(points=points, checkpoints=checkpoints)
