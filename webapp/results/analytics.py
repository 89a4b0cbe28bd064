"""Aggregates over a run's rollouts (tool use, per-prompt learning) and over a team's runs (the
task x algorithm table, the dashboard's best runs). Each is one or two SQL queries; Python only
shapes the rows."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from trainer.contract import VAL_METRIC, VAL_PREFIX, val_key
from webapp.experiments.models import Run, RunKind, RunStatus
from webapp.results.models import ReferenceResult

MAX_STEP_BUCKETS = 20
SOLVED = 0.5  # a prompt counts as solved at a step when at least half its rollouts succeed
# Fewer samples than this say nothing about stability: a row seen once or twice that is not solved
# at its last step is "too few samples", not "unstable" (docs/rollouts.md#per-prompt-learning).
MIN_SAMPLES_FOR_UNSTABLE = 3
VERDICTS = ("never solved", "learned", "regressed", "unstable", "too few samples", "solved from the start")


def samples_per_step(run: Run) -> int:
    """Trajectories per training step (trainer.batch_size x rollout.n), for the samples x-axis."""
    config = run.config or {}
    batch = (config.get("trainer") or {}).get("batch_size") or 1
    n = (config.get("rollout") or {}).get("n") or 1
    return int(batch) * int(n)


# -- tools ----------------------------------------------------------------------------------------


@dataclass
class ToolRow:
    steps: str
    calls: int
    calls_per_trajectory: float
    error_rate: float
    malformed_rate: float
    mean_latency_s: float
    p95_latency_s: float


@dataclass
class ToolStats:
    name: str
    total: ToolRow
    rows: list[ToolRow] = field(default_factory=list)


def _step_width(run: Run) -> tuple[int, int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(training_step), max(training_step) FROM results_trajectory WHERE run_id = %s",
            [run.pk],
        )
        lo, hi = cursor.fetchone()
    if lo is None:
        return 0, 0, 1
    return lo, hi, max(1, math.ceil((hi - lo + 1) / MAX_STEP_BUCKETS))


def tool_stats(run: Run) -> list[ToolStats]:
    """Per tool, per range of training steps: calls per trajectory, error, malformed, latency."""
    lo, _hi, width = _step_width(run)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (training_step - %(lo)s) / %(w)s, count(*) FROM results_trajectory WHERE run_id = %(run)s "
            "GROUP BY 1",
            {"run": run.pk, "lo": lo, "w": width},
        )
        trajectories = dict(cursor.fetchall())
        cursor.execute(
            """
            SELECT coalesce(nullif(name, ''), '(no name: unparsed call)'), (training_step - %(lo)s) / %(w)s,
                   count(*), count(*) FILTER (WHERE error IS NOT NULL), count(*) FILTER (WHERE error = 'malformed'),
                   avg(latency_s), percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_s)
            FROM results_toolcall WHERE run_id = %(run)s GROUP BY 1, 2 ORDER BY 1, 2
            """,
            {"run": run.pk, "lo": lo, "w": width},
        )
        rows = cursor.fetchall()
    by_tool: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        by_tool[row[0]].append(row[1:])
    total_trajectories = sum(trajectories.values())
    return [
        ToolStats(
            name,
            _tool_row("all steps", items, total_trajectories),
            [_tool_row(_range(lo, width, b), [(b, *rest)], trajectories.get(b, 0)) for b, *rest in items],
        )
        for name, items in sorted(by_tool.items())
    ]


def _range(lo: int, width: int, bucket: int) -> str:
    start = lo + bucket * width
    return str(start) if width == 1 else f"{start}-{start + width - 1}"


def _tool_row(label: str, items: Sequence[tuple[Any, ...]], trajectories: int) -> ToolRow:
    calls = sum(i[1] for i in items)
    errors = sum(i[2] for i in items)
    malformed = sum(i[3] for i in items)
    latency = sum(i[4] * i[1] for i in items) / calls if calls else 0.0
    return ToolRow(
        steps=label,
        calls=calls,
        calls_per_trajectory=calls / trajectories if trajectories else 0.0,
        error_rate=errors / calls if calls else 0.0,
        malformed_rate=malformed / calls if calls else 0.0,
        mean_latency_s=latency,
        p95_latency_s=max(i[5] or 0.0 for i in items),
    )


# -- per-prompt learning ----------------------------------------------------------------------------


@dataclass
class PromptCurve:
    sample_index: int
    data_source: str
    points: list[tuple[int, float]]  # (training step, success rate of the prompt's group)
    verdict: str  # one of VERDICTS
    learned_at: int | None = None


def classify(points: Sequence[tuple[int, float]]) -> tuple[str, int | None]:
    rates = [rate for _step, rate in points]
    if not any(rate > 0 for rate in rates):
        return "never solved", None
    if rates[-1] < SOLVED and any(rate >= SOLVED for rate in rates):
        return "regressed", None
    # The first step from which every later appearance is solved.
    learned_from = None
    for index in range(len(rates) - 1, -1, -1):
        if rates[index] < SOLVED:
            break
        learned_from = index
    if learned_from is None:
        return ("unstable" if len(rates) >= MIN_SAMPLES_FOR_UNSTABLE else "too few samples"), None
    if learned_from == 0:
        return "solved from the start", points[0][0]
    return "learned", points[learned_from][0]


def prompt_curves(run: Run) -> list[PromptCurve]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sample_index, data_source, training_step, avg(success::int) FROM results_trajectory "
            "WHERE run_id = %s GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            [run.pk],
        )
        rows = cursor.fetchall()
    grouped: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
    for sample, source, step, rate in rows:
        grouped[(sample, source)].append((step, float(rate)))
    curves = []
    for (sample, source), points in grouped.items():
        verdict, learned_at = classify(points)
        curves.append(PromptCurve(sample, source, points, verdict, learned_at))
    return curves


# -- the task x algorithm table --------------------------------------------------------------------

VAL_METRIC_ORDER = (VAL_METRIC, "success", "score")


def primary_val_key(task: str, keys: Iterable[str]) -> str | None:
    """The validation metric that stands for a run on its task: val/<task>/acc, then success, score;
    else the first val/.../acc, else any val/ key. verl's val-core keys arrive as val/<task>/acc
    (trainer.backends.canonical_key)."""
    names = sorted(keys)
    for metric in VAL_METRIC_ORDER:
        if val_key(task, metric) in names:
            return val_key(task, metric)
    for metric in VAL_METRIC_ORDER:
        for name in names:
            if name.startswith(VAL_PREFIX) and name.endswith("/" + metric):
                return name
    return next((n for n in names if n.startswith(VAL_PREFIX)), None)


@dataclass
class RunResult:
    run: Run
    key: str
    final: float
    best: float


def run_results(runs: Sequence[Run]) -> list[RunResult]:
    """Final and best value of each run's primary validation metric."""
    by_id = {run.pk: run for run in runs}
    if not by_id:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT l.run_id, k.name, l.value,
                   (SELECT max(p.value) FROM results_metricpoint p WHERE p.run_id = l.run_id
                    AND p.key_id = l.key_id AND p.value > '-Infinity' AND p.value < 'Infinity')
            FROM results_metriclatest l JOIN results_metrickey k ON k.id = l.key_id
            WHERE l.run_id = ANY(%s) AND k.name LIKE %s
            """,
            [list(by_id), VAL_PREFIX + "%"],
        )
        rows = cursor.fetchall()
    values: dict[int, dict[str, tuple[float, float]]] = defaultdict(dict)
    for run_id, name, final, best in rows:
        values[run_id][name] = (final, best if best is not None else final)
    results = []
    for run_id, metrics in values.items():
        run = by_id[run_id]
        key = primary_val_key(run.experiment.task, metrics)
        if key is not None:
            results.append(RunResult(run, key, *metrics[key]))
    return results


@dataclass
class Cell:
    task: str
    algorithm: str
    key: str
    finals: list[float]
    bests: list[float]
    run_ids: list[int]

    @staticmethod
    def _mean_std(values: Sequence[float]) -> tuple[float, float]:
        return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    @property
    def final(self) -> tuple[float, float]:
        return self._mean_std(self.finals)

    @property
    def best(self) -> tuple[float, float]:
        return self._mean_std(self.bests)

    @property
    def count(self) -> int:
        return len(self.run_ids)


@dataclass
class Matrix:
    tasks: list[str]
    algorithms: list[str]
    cells: dict[tuple[str, str], Cell]

    def cell(self, task: str, algorithm: str) -> Cell | None:
        return self.cells.get((task, algorithm))


def _trained(team: Any) -> QuerySet[Run]:
    """The team's succeeded training runs: an evaluation scores a model, it is no seed of a training
    result (docs/evaluations.md#comparing)."""
    return Run.objects.filter(team=team, status=RunStatus.SUCCEEDED, kind=RunKind.TRAINING)


def comparison(team: Any, runs: Sequence[Run] | None = None) -> Matrix:
    """Task x algorithm over the team's finished training runs, or those of ``runs`` (a sweep's), as
    mean and std over seeds, with the count."""
    chosen = _trained(team)
    if runs is not None:
        chosen = chosen.filter(pk__in=[run.pk for run in runs])
    runs = list(chosen.select_related("experiment").order_by("pk"))
    cells: dict[tuple[str, str], Cell] = {}
    for result in run_results(runs):
        task = result.run.experiment.task or "(no task)"
        algorithm = result.run.experiment.preset or "(no preset)"
        cell = cells.setdefault((task, algorithm), Cell(task, algorithm, result.key, [], [], []))
        cell.finals.append(result.final)
        cell.bests.append(result.best)
        cell.run_ids.append(result.run.pk)
    return Matrix(sorted({t for t, _ in cells}), sorted({a for _, a in cells}), cells)


@dataclass
class ReferenceTable:
    source: str
    methods: list[str]
    columns: list[tuple[str, str]]  # (task, metric)
    values: dict[tuple[str, str, str], float]  # (method, task, metric) -> value

    def value(self, method: str, task: str, metric: str) -> float | None:
        return self.values.get((method, task, metric))


def reference_tables() -> list[ReferenceTable]:
    tables: dict[str, ReferenceTable] = {}
    for row in ReferenceResult.objects.all():
        table = tables.setdefault(row.source, ReferenceTable(row.source, [], [], {}))
        if row.method not in table.methods:
            table.methods.append(row.method)
        if (row.task, row.metric) not in table.columns:
            table.columns.append((row.task, row.metric))
        table.values[(row.method, row.task, row.metric)] = row.value
    return list(tables.values())


# -- dashboard ------------------------------------------------------------------------------------


def best_per_task(team: Any) -> list[RunResult]:
    """For each task, the finished run with the highest final primary validation metric."""
    runs = list(_trained(team).select_related("experiment"))
    best: dict[str, RunResult] = {}
    for result in run_results(runs):
        task = result.run.experiment.task or "(no task)"
        if task not in best or result.final > best[task].final:
            best[task] = result
    return [best[task] for task in sorted(best)]
