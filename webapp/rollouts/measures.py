"""The per-trajectory quantities the histograms bin and the rollout list filters by a value range
(docs/rollouts.md#histograms): one registry, read by both, so a bin's link selects exactly its
trajectories."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, Q

from webapp.ingestion.models import TrajectoryStep


@dataclass(frozen=True)
class Measure:
    name: str
    label: str
    sql: str  # its value in SQL, over results_trajectory as t (and its first step as s when joined)
    field: str | None  # the trajectory's field the ORM filters on; None: the first step's advantage
    integer: bool  # bins of whole numbers

    @property
    def joins_first_step(self) -> bool:
        return self.field is None


# A trajectory's advantage is its first step's: GRPO-like estimators give every step of a trajectory
# the same one, and a per-step estimator's first decision is the one the prompt asked for.
MEASURES: dict[str, Measure] = {
    m.name: m
    for m in (
        Measure("reward", "Reward", "t.total_reward", "total_reward", integer=False),
        Measure("advantage", "Advantage", "s.advantage", None, integer=False),
        Measure("length", "Response length (tokens)", "t.response_tokens", "response_tokens", integer=True),
        Measure("turns", "Turns", "t.num_steps", "num_steps", integer=True),
        Measure("tool_calls", "Tool calls", "t.num_tool_calls", "num_tool_calls", integer=True),
    )
}
MEASURE_CHOICES = [(m.name, m.label) for m in MEASURES.values()]


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
