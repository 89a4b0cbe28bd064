"""Where a step's time goes (docs/health.md#time-breakdown): the parts both backends report under
trainer.contract.TIME_BREAKDOWN_KEYS, and what they leave of timing/step_s shown as waiting."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainer.contract import PERF_TOKENS_PER_S, TIME_BREAKDOWN_KEYS, TIMING_STEP_S
from webapp.experiments.models import Run
from webapp.ingestion import metrics_store
from webapp.ingestion.models import MetricPoint

MAX_STEPS = 500  # the latest steps drawn; one stacked bar each
WAITING = "waiting"


def waiting(step_s: float | None, parts: Mapping[str, float]) -> float | None:
    """The step time no part explains (never below 0: parts timed on other workers may overlap)."""
    if step_s is None or not math.isfinite(step_s):
        return None
    return max(0.0, step_s - sum(v for v in parts.values() if math.isfinite(v)))


def breakdown(run: Run) -> dict[str, Any]:
    """{"steps": [...], "series": {key: [seconds or None per step]}, "tokens_per_s": [...]}."""
    names = [*TIME_BREAKDOWN_KEYS, TIMING_STEP_S, PERF_TOKENS_PER_S]
    ids = {key_id: name for name in names if (key_id := metrics_store.known_key_id(name)) is not None}
    rows = MetricPoint.objects.filter(run=run, key_id__in=list(ids)).values_list("key_id", "step", "value")
    by_step: dict[int, dict[str, float]] = {}
    for key_id, step, value in rows.order_by("-step")[: MAX_STEPS * len(names)]:
        by_step.setdefault(step, {})[ids[key_id]] = value
    steps = sorted(by_step)[-MAX_STEPS:]
    shown = [key for key in TIME_BREAKDOWN_KEYS if any(key in by_step[step] for step in steps)]
    series: dict[str, list[float | None]] = {
        key: [_finite(by_step[s].get(key)) for s in steps] for key in shown
    }
    series[WAITING] = [
        waiting(by_step[s].get(TIMING_STEP_S), {k: by_step[s][k] for k in shown if k in by_step[s]})
        for s in steps
    ]
    return {
        "steps": steps,
        "series": series,
        "tokens_per_s": [_finite(by_step[s].get(PERF_TOKENS_PER_S)) for s in steps],
    }


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
