"""Two to eight runs side by side (docs/runs-and-curves.md#compare-runs): the config values that
differ, grouped by config section; each run's final and best reward and validation metric with its
% change against a chosen baseline run; the health checks firing; the time and tokens each took."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from trainer.config import flatten_paths
from trainer.contract import PERF_GENERATED_TOKENS
from webapp.experiments.models import LoggedValue, Run
from webapp.monitoring.checks import CHECKS
from webapp.monitoring.models import RunHealth
from webapp.results.summary import MetricFact, RunSummary, summarize

MIN_RUNS, MAX_RUNS = 2, 8
TOP_LEVEL = "(top level)"  # the section of a config field outside every section (backend, seed, ...)
PARAMS = "params"  # an MLflow run's logged parameters


class CompareRefused(ValueError):
    """Fewer than MIN_RUNS or more than MAX_RUNS runs asked for."""


def check_count(count: int) -> None:
    if not MIN_RUNS <= count <= MAX_RUNS:
        raise CompareRefused(f"compare {MIN_RUNS} to {MAX_RUNS} runs; {count} chosen")


@dataclass
class ConfigRow:
    path: str  # the field's whole path, its section first
    values: list[str]  # one per run
    differs: bool


@dataclass
class ConfigSection:
    name: str
    rows: list[ConfigRow] = field(default_factory=list)


def config_sections(runs: Sequence[Run], only_different: bool = True) -> list[ConfigSection]:
    """Every config path and MLflow param of the runs, one value per run ("—" where a run has none),
    grouped by section (the path's first part); only those that differ unless asked for all."""
    columns: list[dict[str, str]] = []
    params = _logged_params([run.pk for run in runs])
    for run in runs:
        values = {path: _shown(value) for path, value in flatten_paths(run.config or {}).items()}
        values |= {f"{PARAMS}.{key}": value for key, value in params.get(run.pk, [])}
        columns.append(values)
    sections: dict[str, ConfigSection] = {}
    for path in sorted(set().union(*columns)) if columns else []:
        shown = [column.get(path, "—") for column in columns]
        differs = len(set(shown)) > 1
        if differs or not only_different:
            name = path.partition(".")[0] if "." in path else TOP_LEVEL
            sections.setdefault(name, ConfigSection(name)).rows.append(ConfigRow(path, shown, differs))
    return sorted(sections.values(), key=lambda s: (s.name != TOP_LEVEL, s.name))


def _logged_params(run_ids: list[int]) -> dict[int, list[tuple[str, str]]]:
    """Each run's MLflow params (key, value), read in one query for all the runs."""
    found: dict[int, list[tuple[str, str]]] = {}
    for run_id, key, value in (
        LoggedValue.objects.params().filter(run_id__in=run_ids).values_list("run_id", "key", "value")
    ):
        found.setdefault(run_id, []).append((key, value))
    return found


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class MetricRow:
    label: str  # "reward/mean, final"
    values: list[float | None]
    changes: list[float | None]  # % change against the baseline run's value (None for the baseline)

    @property
    def cells(self) -> list[tuple[float | None, float | None]]:
        return list(zip(self.values, self.changes, strict=True))


@dataclass
class RunColumn:
    run: Run
    summary: RunSummary
    tokens: float | None  # generated tokens, summed over the steps the run logged
    firing: list[str]  # the labels of the health checks firing now

    @property
    def steps(self) -> int:
        return self.run.step


@dataclass
class Comparison:
    columns: list[RunColumn]
    baseline: int  # index into columns
    metrics: list[MetricRow]
    sections: list[ConfigSection]

    @property
    def baseline_run(self) -> Run:
        return self.columns[self.baseline].run


def percent_change(value: float | None, baseline: float | None) -> float | None:
    """(value - baseline) / |baseline| in percent; None without both or against zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    return (value - baseline) / abs(baseline) * 100


def compare(runs: Sequence[Run], baseline: int = 0, only_different: bool = True) -> Comparison:
    """The runs side by side, changes measured against ``runs[baseline]``."""
    check_count(len(runs))
    baseline = baseline if 0 <= baseline < len(runs) else 0
    tokens = _generated_tokens([run.pk for run in runs])
    firing = _firing([run.pk for run in runs])
    columns = [RunColumn(run, summarize(run), tokens.get(run.pk), firing.get(run.pk, [])) for run in runs]
    return Comparison(
        columns, baseline, _metric_rows(columns, baseline), config_sections(runs, only_different)
    )


def _metric_rows(columns: list[RunColumn], baseline: int) -> list[MetricRow]:
    facts: dict[str, list[MetricFact | None]] = {}
    for index, column in enumerate(columns):
        for fact in (column.summary.reward, column.summary.validation):
            if fact is not None:
                facts.setdefault(fact.key, [None] * len(columns))[index] = fact
    rows = []
    for key, per_run in facts.items():
        for what, pick in (("final", lambda f: f.latest), ("best", lambda f: f.best)):
            values = [pick(fact) if fact else None for fact in per_run]
            if all(value is None for value in values):
                continue  # a metric none of the runs logged (yet)
            changes = [
                None if i == baseline else percent_change(v, values[baseline]) for i, v in enumerate(values)
            ]
            rows.append(MetricRow(f"{key}, {what}", values, changes))
    return rows


def _generated_tokens(run_ids: list[int]) -> dict[int, float]:
    """Each run's tokens generated over every step it logged: the key's total, kept as points arrive."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.run_id, l.total FROM results_metriclatest l JOIN results_metrickey k ON k.id = l.key_id "
            "WHERE k.name = %s AND l.run_id = ANY(%s) AND l.total IS NOT NULL",
            [PERF_GENERATED_TOKENS, run_ids],
        )
        return dict(cursor.fetchall())


def _firing(run_ids: list[int]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for run_id, name in RunHealth.objects.filter(run_id__in=run_ids, firing=True).values_list(
        "run_id", "check_name"
    ):
        label = CHECKS.get(name).label if name in CHECKS.names() else name
        found.setdefault(run_id, []).append(label)
    return found
