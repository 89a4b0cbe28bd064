"""Each training step's values of the measures the histograms bin (docs/rollouts.md#histograms),
kept in ``StepValues`` beside the trajectories: recomputed from them for the steps a batch stores
into, or a retention sweep or a resume deletes from, in that same transaction. A heat-map of a
million trajectories then reads a row per step; its counts are the trajectories' own, since a step
keeps every distinct value with how many trajectories have it.

The run's batches take turns (they hold its storage row to the end of their transaction), so the
recompute of a step always sees every trajectory stored before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection

from webapp.ingestion.measures import MEASURES, Measure

_TABLE = "results_stepvalues"


def _values_sql(measure: Measure, where: str) -> str:
    """A run's (every run's) (measure, step, value, trajectories) of the measure's finite values."""
    joined = (
        " JOIN results_trajectorystep s ON s.trajectory_id = t.id AND s.run_id = t.run_id AND s.index = 0"
        if measure.joins_first_step
        else ""
    )
    return (
        f"SELECT t.run_id, '{measure.name}' AS measure, t.training_step, ({measure.sql})::float8 AS value, "
        f"count(*)::int AS n FROM results_trajectory t{joined} WHERE {where} AND {measure.finite} "
        "GROUP BY 1, 2, 3, 4"
    )


def _fill(where: str, params: dict[str, Any]) -> None:
    """Insert the step rows of the trajectories ``where`` selects (over results_trajectory as t)."""
    values = " UNION ALL ".join(_values_sql(measure, where) for measure in MEASURES.values())
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {_TABLE} (run_id, measure, training_step, values, counts)
            SELECT run_id, measure, training_step, array_agg(value ORDER BY value), array_agg(n ORDER BY value)
            FROM ({values}) AS v GROUP BY run_id, measure, training_step""",
            params,
        )


def refresh_steps(run_id: int, steps: Iterable[int]) -> None:
    """Recompute the run's rows of these training steps from their trajectories now."""
    chosen = sorted(set(steps))
    if not chosen:
        return
    params: dict[str, Any] = {"run": run_id, "steps": chosen}
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_TABLE} WHERE run_id = %(run)s AND training_step = ANY(%(steps)s)", params
        )
    # t.run_id = a constant: Postgres reads the run's partition only (docs/rollouts.md#partitioning).
    _fill("t.run_id = %(run)s AND t.training_step = ANY(%(steps)s)", params)


def rebuild(run_id: int | None = None) -> None:
    """Recompute every row of the run (of every run: ``None``), as for trajectories loaded with SQL."""
    with connection.cursor() as cursor:
        if run_id is None:
            cursor.execute(f"DELETE FROM {_TABLE}")
        else:
            cursor.execute(f"DELETE FROM {_TABLE} WHERE run_id = %s", [run_id])
    _fill("true" if run_id is None else "t.run_id = %(run)s", {"run": run_id})
