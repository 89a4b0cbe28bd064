"""The per-trajectory quantities the histograms bin and the rollout list filters by a value range
(docs/rollouts.md#histograms): one registry, read by ingestion (which keeps each training step's
values of them, webapp.ingestion.step_values), the histograms and the rollout list's filter."""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def finite(self) -> str:
        """SQL: the trajectory has a value of the measure a histogram can bin."""
        if self.integer:
            return f"{self.sql} IS NOT NULL"
        # NaN sorts above Infinity in Postgres: the second comparison leaves it out too.
        return f"{self.sql} > '-Infinity' AND {self.sql} < 'Infinity'"


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
