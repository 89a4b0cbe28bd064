"""Histograms of a run's trajectories over training steps (docs/rollouts.md#histograms): one step's
histogram of a measure, and the heat-map of every step (step x value bins), counted in SQL from each
step's values that ingestion keeps (webapp.ingestion.step_values): a row per step, not per trajectory.

The bin edges are chosen here, in Python, and sent to Postgres' width_bucket as an array: it only
compares, never computes an edge, so a bin's link (measure_min <= value < measure_below, the
rollout list's value-range filter) selects exactly the trajectories the bin counted. The top edge is
the next float above the largest value, so the last bin holds it. Non-finite values are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.db import connection

from webapp.ingestion.measures import MEASURES, Measure

DEFAULT_MEASURE = "reward"
BINS = 20  # value bins of a histogram
MAX_BINS = 50
STEP_COLUMNS = 120  # step bins of the heat-map, at most


@dataclass
class Bin:
    low: float
    below: float
    count: int
    integer: bool
    last: bool = False  # the top bin: its upper edge lies just above the largest value, which it holds

    @property
    def label(self) -> str:
        if self.integer:
            low, last = int(self.low), int(self.below) - 1
            return str(low) if low == last else f"{low} to {last}"
        if self.last:
            return f"[{self.low:.4g}, {math.nextafter(self.below, -math.inf):.4g}]"
        return f"[{self.low:.4g}, {self.below:.4g})"

    def filters(self, measure: str) -> dict[str, Any]:
        """The rollout list's query parameters for this bin's trajectories."""
        return {"measure": measure, "measure_min": _shown(self.low), "measure_below": _shown(self.below)}


@dataclass
class Histogram:
    measure: Measure
    step: int
    bins: list[Bin] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(b.count for b in self.bins)

    def links(self, rollouts_url: str) -> list[tuple[Bin, str]]:
        """Each bin with the rollout list of its trajectories."""
        return [
            (b, _url(rollouts_url, {"step": self.step, **b.filters(self.measure.name)})) for b in self.bins
        ]


@dataclass
class HeatMap:
    measure: Measure
    edges: list[float] = field(default_factory=list)  # value bins' edges, len(bins) + 1
    steps: list[tuple[int, int]] = field(default_factory=list)  # each column's first and last step
    counts: list[list[int]] = field(default_factory=list)  # [column][value bin]


def _bins(cut: list[float], counts: list[int], integer: bool) -> list[Bin]:
    top = len(counts) - 1
    return [Bin(cut[i], cut[i + 1], counts[i], integer, last=i == top) for i in range(len(counts))]


def _url(base: str, query: dict[str, Any]) -> str:
    return f"{base}?{urlencode(query)}"


def chart_data(heat: HeatMap, histogram: Histogram | None, rollouts_url: str) -> dict[str, Any]:
    """What static/js/histograms.js draws: the heat-map's cells and the step's bars, with the rollout
    list's URL a click opens (a cell adds its step range and value range to it)."""
    bars = histogram.links(rollouts_url) if histogram else []
    return {
        "measure": heat.measure.name,
        "label": heat.measure.label,
        "integer": heat.measure.integer,
        "rollouts_url": rollouts_url,
        "edges": [_shown(edge) for edge in heat.edges],
        "steps": heat.steps,
        "counts": heat.counts,
        "step": histogram.step if histogram else None,
        "bars": [{"tick": f"{b.low:.3g}", "count": b.count, "url": url} for b, url in bars],
    }


def _shown(edge: float) -> int | float:
    """An edge as the URL writes it: whole numbers without ``.0``; a float's repr reads back exactly."""
    return int(edge) if edge.is_integer() and abs(edge) < 2**53 else edge


def edges(low: float, high: float, integer: bool, bins: int = BINS) -> list[float]:
    """``bins`` equal bins from ``low`` to ``high`` (whole-number wide ones for an integer
    measure); the top edge lies just above ``high``."""
    if integer:
        first, last = math.floor(low), math.floor(high)
        width = max(1, math.ceil((last - first + 1) / bins))
        count = math.ceil((last - first + 1) / width)
        return [float(first + k * width) for k in range(count + 1)]
    top = math.nextafter(high, math.inf)
    if low == high:
        return [low, top]
    return [low + (high - low) * k / bins for k in range(bins)] + [top]


# A run's rows of one measure in the steps' values table (webapp.ingestion.step_values): each
# distinct finite value of a step with how many trajectories have it; ``v`` the value, ``n`` the count.
_VALUES = (
    "FROM results_stepvalues r CROSS JOIN LATERAL unnest(r.values, r.counts) AS u(v, n) "
    "WHERE r.run_id = %(run)s AND r.measure = %(measure)s"
)
_ROWS = "FROM results_stepvalues r WHERE r.run_id = %(run)s AND r.measure = %(measure)s"


def _fetch(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def step_histogram(run_id: int, measure_name: str, step: int, bins: int = BINS) -> Histogram:
    """One step's histogram of a measure; no bins when the step has no finite value of it."""
    measure = MEASURES[measure_name]
    params: dict[str, Any] = {"run": run_id, "measure": measure.name, "step": step}
    one_step = " AND r.training_step = %(step)s"
    # A step's values are stored ascending: its extremes are the first and the last.
    rows = _fetch(f"SELECT r.values[1], r.values[cardinality(r.values)] {_ROWS}{one_step}", params)
    found = Histogram(measure, step)
    if not rows:
        return found
    ((low, high),) = rows
    cut = edges(float(low), float(high), measure.integer, min(bins, MAX_BINS))
    counts = dict(
        _fetch(
            f"SELECT width_bucket(u.v, %(edges)s::float8[]), sum(u.n) {_VALUES}{one_step} GROUP BY 1",
            {**params, "edges": cut},
        )
    )
    found.bins = _bins(cut, [counts.get(i + 1, 0) for i in range(len(cut) - 1)], measure.integer)
    return found


def heat_map(run_id: int, measure_name: str, bins: int = BINS) -> HeatMap:
    """Every step's histogram of a measure on the same value bins, steps grouped into at most
    STEP_COLUMNS columns of equal width."""
    measure = MEASURES[measure_name]
    params: dict[str, Any] = {"run": run_id, "measure": measure.name}
    ((low, high, first, last),) = _fetch(
        "SELECT min(r.values[1]), max(r.values[cardinality(r.values)]), min(r.training_step), "
        f"max(r.training_step) {_ROWS}",
        params,
    )
    found = HeatMap(measure)
    if low is None:
        return found
    found.edges = edges(float(low), float(high), measure.integer, min(bins, MAX_BINS))
    width = max(1, math.ceil((last - first + 1) / STEP_COLUMNS))
    columns = math.ceil((last - first + 1) / width)
    found.steps = [(first + c * width, min(last, first + (c + 1) * width - 1)) for c in range(columns)]
    found.counts = [[0] * (len(found.edges) - 1) for _ in range(columns)]
    rows = _fetch(
        f"SELECT (r.training_step - %(first)s) / %(width)s, width_bucket(u.v, %(edges)s::float8[]), sum(u.n) "
        f"{_VALUES} GROUP BY 1, 2",
        {**params, "first": first, "width": width, "edges": found.edges},
    )
    for column, value_bin, count in rows:
        found.counts[column][value_bin - 1] = count
    return found


def latest_step(run_id: int) -> int | None:
    """The run's newest training step with trajectories (one probe of the step index)."""
    rows = _fetch(
        "SELECT training_step FROM results_trajectory WHERE run_id = %(run)s ORDER BY training_step DESC LIMIT 1",
        {"run": run_id},
    )
    return rows[0][0] if rows else None
