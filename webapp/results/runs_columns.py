"""The runs table's columns (docs/runs-and-curves.md#the-runs-table): what each column id names and the SQL
value of its cells, and what the column chooser offers. A column is named by an id that travels in URLs
and saved layouts:

- an attribute of the run: ``status``, ``preset``, ``seed``, ``duration``, … (``ATTRIBUTES``);
- a config value: ``config:<dotted RunConfig path>``, e.g. ``config:algorithm.kl_coef``;
- an MLflow param of the run: ``param:<key>``;
- a metric: ``last:<key>`` (the latest value), ``max:<key>`` or ``min:<key>`` (over every step).

Metrics are read from the tables ingestion keeps up to date (``MetricLatest``, and the coarsest
level of ``MetricSummary`` for min and max), never from the point table, so a sort on a metric
costs one join per run, not a scan of its points.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FilteredRelation,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, Now

from webapp.experiments.executors import EXTERNAL_EXECUTOR, outside_executors
from webapp.experiments.models import LoggedValue, RunKind
from webapp.ingestion import metrics_store
from webapp.ingestion.models import SUMMARY_WIDTHS, MetricLatest, MetricSummary
from webapp.monitoring.models import RunHealth

MAX_COLUMNS = 40
MAX_KEY_LENGTH = 250  # MLflow's limit for metric and param keys
TOP_SUMMARY_LEVEL = len(SUMMARY_WIDTHS)  # the fewest rows per series; min and max cover every point
CONFIG_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class BadQuery(ValueError):
    """A column, filter or sort the table cannot use; the message says what would work."""


# -- columns ----------------------------------------------------------------------------------------

# How a column's values compare and print.
TEXT, NUMBER, TIME, DURATION, STATUS, KIND, TAGS, JSON = (
    "text",
    "number",
    "time",
    "duration",
    "status",
    "kind",
    "tags",
    "json",
)
# What a run is, as the Kind column says it: launched to train, an evaluation of a model, or logged
# by an MLflow client or imported (Run.is_external).
RUN_KINDS = (RunKind.TRAINING.value, RunKind.SFT.value, RunKind.EVALUATION.value, EXTERNAL_EXECUTOR)

# Each filter operator: its name in URLs, the sign the table shows, the Django lookup it filters
# with ("ne" negates "exact").
_OPERATOR_TABLE = (
    ("eq", "=", "exact"),
    ("ne", "≠", "exact"),
    ("gt", ">", "gt"),
    ("ge", "≥", "gte"),
    ("lt", "<", "lt"),
    ("le", "≤", "lte"),
    ("contains", "contains", "icontains"),
)
OPERATORS: Mapping[str, str] = {op: sign for op, sign, _ in _OPERATOR_TABLE}
LOOKUPS: Mapping[str, str] = {op: lookup for op, _, lookup in _OPERATOR_TABLE}
OPERATORS_FOR: Mapping[str, tuple[str, ...]] = {
    TEXT: ("contains", "eq", "ne"),
    NUMBER: ("eq", "ne", "gt", "ge", "lt", "le"),
    TIME: ("gt", "ge", "lt", "le"),
    DURATION: ("gt", "ge", "lt", "le"),
    STATUS: ("eq", "ne"),
    KIND: ("eq", "ne"),
    TAGS: ("contains", "ne"),
    JSON: ("eq", "ne", "gt", "ge", "lt", "le", "contains"),
}
METRIC_KINDS: Mapping[str, str] = {"last": "latest", "max": "max", "min": "min"}


@dataclass(frozen=True)
class Column:
    id: str
    label: str
    value_type: str
    kind: str  # "attribute", "config", "param" or a metric kind
    key: str = ""  # the config path, param key or metric key
    groupable: bool = False
    aggregate: bool = True  # a group row shows its mean (numeric columns only)

    @property
    def operators(self) -> list[tuple[str, str]]:
        return [(op, OPERATORS[op]) for op in OPERATORS_FOR[self.value_type]]

    @property
    def is_numeric(self) -> bool:
        return self.value_type in (NUMBER, DURATION)

    @property
    def aggregated(self) -> bool:
        return self.is_numeric and self.aggregate

    def aliases(self, name: str) -> dict[str, Any]:
        """Expressions to add with QuerySet.alias(): ``name`` is the column's value."""
        if self.kind == "attribute":
            return {name: _ATTRIBUTE_EXPRESSIONS[self.id]()}
        if self.kind == "config":
            return {name: config_value(self.key)}
        if self.kind == "param":
            params = LoggedValue.objects.params().filter(run=OuterRef("pk"), key=self.key).values("value")[:1]
            return {name: Subquery(params, output_field=TextField())}
        return _metric_aliases(name, self.kind, self.key)

    def text_aliases(self, name: str) -> dict[str, Any]:
        """The value as text, for ``contains`` on a config value."""
        if self.kind == "config":
            *parents, leaf = self.key.split(".")
            return {name: KeyTextTransform(leaf, config_value(".".join(parents)) if parents else "config")}
        return self.aliases(name)


def config_value(path: str) -> Any:
    expression: Any = F("config")
    for part in path.split(".") if path else []:
        expression = KeyTransform(part, expression)
    return expression


def _metric_aliases(name: str, kind: str, key: str) -> dict[str, Any]:
    key_id = metrics_store.known_key_id(key)
    if key_id is None:  # no run ever logged it: every cell is empty
        # A typed NULL: Postgres refuses a bare one in ORDER BY and cannot pick an AVG for it.
        return {name: Cast(Value(None), FloatField())}
    if kind == "last":
        joined = f"{name}_latest"
        return {
            joined: FilteredRelation("latest_metrics", condition=Q(latest_metrics__key_id=key_id)),
            name: F(f"{joined}__value"),
        }
    column, aggregate = ("max_value", Max) if kind == "max" else ("min_value", Min)
    extremes = (
        MetricSummary.objects.filter(run_id=OuterRef("pk"), key_id=key_id, level=TOP_SUMMARY_LEVEL)
        .values("run_id")
        .annotate(extreme=aggregate(column))
        .values("extreme")
    )
    return {name: Subquery(extremes, output_field=FloatField())}


def _duration() -> Any:
    return ExpressionWrapper(
        Coalesce(F("finished_at"), Now()) - F("started_at"), output_field=DurationField()
    )


def _kind() -> Any:
    """One of RUN_KINDS: an evaluation or an SFT run first (launched runs), then whether we launched it."""
    return Case(
        When(kind=RunKind.EVALUATION, then=Value(RunKind.EVALUATION.value)),
        When(kind=RunKind.SFT, then=Value(RunKind.SFT.value)),
        When(executor__in=outside_executors(), then=Value(EXTERNAL_EXECUTOR)),
        default=Value(RunKind.TRAINING.value),
        output_field=TextField(),
    )


def import_source() -> Any:
    """Where an imported run came from (docs/importers.md#in-the-runs-table): its IMPORT_SOURCE_TAG."""
    from trainer.contract import IMPORT_SOURCE_TAG

    tag = LoggedValue.objects.tags().filter(run=OuterRef("pk"), key=IMPORT_SOURCE_TAG).values("value")[:1]
    return Subquery(tag, output_field=TextField())


def _health_firing() -> Any:
    """How many health checks fire on the run (docs/health.md#checks)."""
    firing = RunHealth.objects.filter(run=OuterRef("pk"), firing=True).values("run").annotate(n=Count("pk"))
    return Coalesce(Subquery(firing.values("n"), output_field=IntegerField()), 0)


_ATTRIBUTE_EXPRESSIONS: Mapping[str, Any] = {
    "name": lambda: F("name"),
    "status": lambda: F("status"),
    "kind": _kind,
    "experiment": lambda: F("experiment__name"),
    "preset": lambda: F("experiment__preset"),
    "task": lambda: F("experiment__task"),
    "seed": lambda: F("seed"),
    "started": lambda: F("started_at"),
    "finished": lambda: F("finished_at"),
    "duration": _duration,
    "steps": lambda: F("step"),
    "created": lambda: F("created"),
    "executor": lambda: F("executor"),
    "tags": lambda: F("labels"),
    "note": lambda: F("note"),
    "health": _health_firing,
    "started_from": lambda: F("started_from_id"),
    "source": import_source,
}


ATTRIBUTES: Mapping[str, Column] = {
    column.id: column
    for column in (
        Column("name", "Name", TEXT, "attribute"),
        Column("status", "Status", STATUS, "attribute", groupable=True),
        Column("kind", "Kind", KIND, "attribute", groupable=True),
        Column("experiment", "Experiment", TEXT, "attribute", groupable=True),
        Column("preset", "Preset", TEXT, "attribute", groupable=True),
        Column("task", "Task", TEXT, "attribute", groupable=True),
        Column("seed", "Seed", NUMBER, "attribute", groupable=True, aggregate=False),
        Column("started", "Started", TIME, "attribute"),
        Column("finished", "Finished", TIME, "attribute"),
        Column("duration", "Duration", DURATION, "attribute"),
        Column("steps", "Steps", NUMBER, "attribute"),
        Column("created", "Created", TIME, "attribute"),
        Column("executor", "Executor", TEXT, "attribute", groupable=True),
        Column("tags", "Tags", TAGS, "attribute"),
        Column("note", "Note", TEXT, "attribute"),
        Column("health", "Health", NUMBER, "attribute", aggregate=False),
        # The lineage (docs/sft.md#start-from): the run whose checkpoint this run started from.
        Column("started_from", "Started from", NUMBER, "attribute", groupable=True, aggregate=False),
        # Where an imported run came from (docs/importers.md#in-the-runs-table).
        Column("source", "Source", TEXT, "attribute", groupable=True),
    )
}


def column(column_id: str) -> Column:
    """The column an id names; BadQuery says what ids look like."""
    if column_id in ATTRIBUTES:
        return ATTRIBUTES[column_id]
    kind, sep, key = column_id.partition(":")
    if not sep or not key or len(key) > MAX_KEY_LENGTH or "\x00" in column_id:
        raise BadQuery(
            f"unknown column {column_id!r}: use one of {', '.join(ATTRIBUTES)}, config:<path>, "
            f"param:<key>, last:<metric>, max:<metric> or min:<metric>"
        )
    if kind == "config":
        if not CONFIG_PATH.match(key):
            raise BadQuery(f"{key!r} is not a config path (dotted names, e.g. algorithm.kl_coef)")
        return Column(column_id, key, JSON, "config", key, groupable=True)
    if kind == "param":
        return Column(column_id, f"param {key}", TEXT, "param", key, groupable=True)
    if kind in METRIC_KINDS:
        return Column(column_id, f"{key} ({METRIC_KINDS[kind]})", NUMBER, kind, key)
    raise BadQuery(f"unknown column kind {kind!r}: use config, param, last, max or min")


def columns(ids: Sequence[str]) -> tuple[list[Column], list[str]]:
    """(the columns, a message per id that names none); duplicates are dropped."""
    found: list[Column] = []
    problems: list[str] = []
    for column_id in dict.fromkeys(ids):
        try:
            found.append(column(column_id))
        except BadQuery as error:
            problems.append(str(error))
    return found[:MAX_COLUMNS], problems


# The default columns fit a 1,024 px window without sideways scrolling (a run's name already holds its
# experiment's, so neither table repeats it); the column chooser adds any other.
TEAM_DEFAULT_COLUMNS = ("name", "status", "health", "task", "preset", "started", "duration", "steps")
EXPERIMENT_DEFAULT_COLUMNS = ("name", "status", "health", "seed", "started", "duration", "steps")


def default_column_ids(task: str | None) -> list[str]:
    """A team's table shows each run's task and preset and its latest reward; an experiment's (``task``)
    shows its seeds, and its task's validation accuracy beside the reward."""
    from trainer.contract import REWARD_MEAN, val_key

    if task is None:
        return [*TEAM_DEFAULT_COLUMNS, f"last:{REWARD_MEAN}"]
    return [*EXPERIMENT_DEFAULT_COLUMNS, f"last:{REWARD_MEAN}", f"last:{val_key(task)}"]


# -- what the column chooser offers ----------------------------------------------------------------


@functools.cache
def config_paths() -> list[str]:
    """Every RunConfig path, from the schema itself (a run's config always has all of them); no
    preset is built, so the first page of the table does not wait for the algorithms to import."""
    from trainer.config import field_paths

    return sorted(field_paths())


def metric_keys(run_ids: Sequence[int]) -> list[str]:
    names = MetricLatest.objects.filter(run_id__in=list(run_ids)).values_list("key__name", flat=True)
    return sorted(set(names))


def param_keys(run_ids: Sequence[int]) -> list[str]:
    keys = LoggedValue.objects.params().filter(run_id__in=list(run_ids)).values_list("key", flat=True)
    return sorted(set(keys))


def filterable(shown: Sequence[Column]) -> list[Column]:
    """Columns the filter form offers: the attributes and whatever else the table shows."""
    extra = [item for item in shown if item.kind != "attribute"]
    return [*ATTRIBUTES.values(), *extra]


def groupable(shown: Sequence[Column]) -> list[Column]:
    return [item for item in filterable(shown) if item.groupable]
