"""What a run's trajectories take, and applying a changed retention policy (docs/rollouts.md#storage).

Each batch's bytes are measured by ``pg_column_size`` over the rows it just wrote
(:func:`batch_sizes`) and added to the run's storage row (webapp.retention.accounting). A text is
counted to the run that stored it first (texts are shared, stored once). A retention change deletes
what the new policy drops, measures the run again, deletes the texts nothing refers to any more and
VACUUMs the tables (:func:`apply_retention`, a Celery task: webapp.ingestion.tasks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from webapp.ingestion import step_values
from webapp.ingestion.models import TextBlob, ToolCall, Trajectory, TrajectoryStep
from webapp.retention.accounting import Sizes
from webapp.retention.models import RunStorage
from webapp.retention.policy import Retention, dropped_sql

logger = logging.getLogger(__name__)

# Ingestion holds it shared while it writes; the sweep of unreferenced texts holds it alone, so it
# never deletes a text a batch in flight has found stored and is about to refer to.
TEXT_SWEEP_LOCK = 0x5354_5854  # an arbitrary key of this app's advisory locks
ROLLOUT_TABLES = (Trajectory, TrajectoryStep, ToolCall, TextBlob)


def hold_texts() -> None:
    """Called by ingestion inside its transaction, before it stores texts (TEXT_SWEEP_LOCK)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock_shared(%s)", [TEXT_SWEEP_LOCK])


def batch_sizes(run_id: int, trajectory_ids: Sequence[int], new_texts: Sequence[str]) -> Sizes:
    """The bytes of the rows one batch wrote, as Postgres stores them (compressed values counted
    compressed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT
              (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM results_trajectory t
                WHERE t.run_id = %(run)s AND t.id = ANY(%(ids)s)),
              (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM results_trajectorystep s
                WHERE s.run_id = %(run)s AND s.trajectory_id = ANY(%(ids)s)),
              (SELECT coalesce(sum(pg_column_size(s.token_signals)), 0) FROM results_trajectorystep s
                WHERE s.run_id = %(run)s AND s.trajectory_id = ANY(%(ids)s)),
              (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM results_toolcall c
                WHERE c.run_id = %(run)s AND c.trajectory_id = ANY(%(ids)s)),
              (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM results_textblob b WHERE b.sha256 = ANY(%(texts)s))""",
            {"run": run_id, "ids": list(trajectory_ids), "texts": list(new_texts)},
        )
        trajectories, steps, signals, calls, texts = cursor.fetchone()
    return Sizes(int(trajectories), int(steps) - int(signals), int(signals), int(calls), int(texts))


def apply_retention(run_id: int) -> None:
    """Delete what the run's policy drops, measure what is left, delete the texts nothing refers to
    and reclaim the space. Safe to run twice (a second run finds nothing to drop)."""
    started = timezone.now()
    with transaction.atomic():
        storage = RunStorage.objects.select_for_update().filter(pk=run_id).first()
        if storage is None:
            return  # the run is gone: its delete scheduled the sweep of its texts
        dropped = dropped_sql(Retention.of(storage))
        if dropped is not None:
            _delete_trajectories(run_id, *dropped)
        sizes = run_sizes(run_id)
        kept = Trajectory.objects.filter(run_id=run_id).count()
        RunStorage.objects.filter(pk=run_id).update(kept=kept, applied_at=started, **sizes.of_rows())
    freed = sweep_texts()
    if freed:
        # The texts that went were this run's (its steps referred to them last); clamped, since a text
        # first stored by another run is counted there.
        RunStorage.objects.filter(pk=run_id).update(text_bytes=F("text_bytes") - freed)
        RunStorage.objects.filter(pk=run_id, text_bytes__lt=0).update(text_bytes=0)
    vacuum()


def delete_trajectories_after(run_id: int, step: int) -> None:
    """Delete the run's trajectories of training steps after ``step`` with their steps and tool calls,
    and measure what is left (a resume supersedes them: docs/resume.md#superseded). Their texts go with
    the next sweep of unreferenced texts."""
    after = "SELECT id FROM results_trajectory WHERE run_id = %(run)s AND training_step > %(after)s"
    _delete_trajectories(run_id, after, {"after": step})
    kept = Trajectory.objects.filter(run_id=run_id).count()
    RunStorage.objects.filter(pk=run_id).update(kept=kept, **run_sizes(run_id).of_rows())


def _delete_trajectories(run_id: int, query: str, params: dict[str, Any]) -> None:
    # One statement: the steps and tool calls of the dropped trajectories, then the trajectories
    # (their foreign keys are checked at commit); it answers how many went from each training step,
    # whose values the histograms read are then recomputed from what is left.
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH dropped AS ({query}),
              calls AS (DELETE FROM results_toolcall c USING dropped d
                WHERE c.run_id = %(run)s AND c.trajectory_id = d.id),
              steps AS (DELETE FROM results_trajectorystep s USING dropped d
                WHERE s.run_id = %(run)s AND s.trajectory_id = d.id),
              gone AS (DELETE FROM results_trajectory t USING dropped d WHERE t.id = d.id
                RETURNING t.training_step)
            SELECT training_step, count(*) FROM gone GROUP BY training_step""",
            {"run": run_id, **params},
        )
        deleted = dict(cursor.fetchall())
    step_values.refresh_steps(run_id, deleted)
    logger.info("run %s: %s trajectories deleted", run_id, sum(deleted.values()))


def run_sizes(run_id: int) -> Sizes:
    """The bytes of the run's rows now (not its texts)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT
              (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM results_trajectory t WHERE t.run_id = %(run)s),
              (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM results_trajectorystep s WHERE s.run_id = %(run)s),
              (SELECT coalesce(sum(pg_column_size(s.token_signals)), 0) FROM results_trajectorystep s
                WHERE s.run_id = %(run)s),
              (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM results_toolcall c WHERE c.run_id = %(run)s)""",
            {"run": run_id},
        )
        trajectories, steps, signals, calls = cursor.fetchone()
    return Sizes(int(trajectories), int(steps) - int(signals), int(signals), int(calls))


def sweep_texts() -> int:
    """Delete the texts no step or tool call refers to (one anti-join); returns the bytes freed."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [TEXT_SWEEP_LOCK])
        cursor.execute(
            """WITH gone AS (DELETE FROM results_textblob b
              WHERE NOT EXISTS (SELECT 1 FROM results_trajectorystep s WHERE s.prompt_id = b.sha256)
                AND NOT EXISTS (SELECT 1 FROM results_trajectorystep s WHERE s.response_id = b.sha256)
                AND NOT EXISTS (SELECT 1 FROM results_toolcall c WHERE c.result_id = b.sha256)
              RETURNING pg_column_size(b.*) AS size)
            SELECT count(*), coalesce(sum(size), 0) FROM gone"""
        )
        count, freed = cursor.fetchone()
    logger.info("deleted %s texts no step refers to (%s bytes)", count, freed)
    return int(freed)


def vacuum() -> None:
    """Make the space of the deleted rows reusable (VACUUM runs outside a transaction)."""
    tables = ", ".join(model._meta.db_table for model in ROLLOUT_TABLES)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {tables}")
