"""The rollout list's filter by a value range of one of the measures the histograms bin
(webapp.ingestion.measures, docs/rollouts.md#histograms): the same registry, so a bin's link selects
exactly its trajectories."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q

from webapp.ingestion.measures import MEASURES
from webapp.ingestion.models import TrajectoryStep


def value_range(name: str, low: float | None, below: float | None, prefix: str = "") -> Q:
    """Trajectories whose ``name`` measure is ``>= low`` and ``< below`` (either bound optional);
    ``prefix`` (``trajectory__``) reaches the trajectory from one of its steps."""
    measure = MEASURES[name]
    bounds = {lookup: value for lookup, value in (("gte", low), ("lt", below)) if value is not None}
    if measure.field is not None:
        return Q(**{f"{prefix}{measure.field}__{lookup}": value for lookup, value in bounds.items()})
    outer_id = "trajectory_id" if prefix else "id"
    first_step = TrajectoryStep.objects.filter(
        trajectory_id=OuterRef(outer_id),
        run_id=OuterRef("run_id"),  # its run's partition only (docs/rollouts.md#partitioning)
        index=0,
        **{f"advantage__{lookup}": value for lookup, value in bounds.items()},
    )
    if not bounds:
        first_step = first_step.filter(advantage__isnull=False)
    return Q(Exists(first_step))
