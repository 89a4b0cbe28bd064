"""The runs table: one row per run of a team or an experiment, sorted, filtered, grouped and paged in
SQL, so the first page stays fast at 10,000 runs (bench/bench_runs_table.py).

A column is named by an id that travels in URLs and saved layouts:

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
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Avg,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FilteredRelation,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
    When,
    Window,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Coalesce, Now
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from webapp.experiments.models import EXTERNAL_EXECUTOR, Run, RunKind, RunParam, RunStatus
from webapp.ingestion import metrics_store
from webapp.ingestion.models import SUMMARY_WIDTHS, MetricSummary
from webapp.monitoring.models import RunHealth

PAGE_SIZE = 50
MAX_COLUMNS = 40
MAX_FILTERS = 12
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
RUN_KINDS = (RunKind.TRAINING.value, RunKind.EVALUATION.value, EXTERNAL_EXECUTOR)

OPERATORS: Mapping[str, str] = {
    "eq": "=", "ne": "≠", "gt": ">", "ge": "≥", "lt": "<", "le": "≤", "contains": "contains",
}  # fmt: skip
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
            return {name: _config_value(self.key)}
        if self.kind == "param":
            params = RunParam.objects.filter(run=OuterRef("pk"), key=self.key).values("value")[:1]
            return {name: Subquery(params, output_field=TextField())}
        return _metric_aliases(name, self.kind, self.key)

    def text_aliases(self, name: str) -> dict[str, Any]:
        """The value as text, for ``contains`` on a config value."""
        if self.kind == "config":
            *parents, leaf = self.key.split(".")
            return {name: KeyTextTransform(leaf, _config_value(".".join(parents)) if parents else "config")}
        return self.aliases(name)


def _config_value(path: str) -> Any:
    expression: Any = F("config")
    for part in path.split(".") if path else []:
        expression = KeyTransform(part, expression)
    return expression


def _metric_aliases(name: str, kind: str, key: str) -> dict[str, Any]:
    key_id = metrics_store.known_key_id(key)
    if key_id is None:  # no run ever logged it: every cell is empty
        return {name: Value(None, output_field=FloatField())}
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
    """One of RUN_KINDS: an evaluation first (a launched run), then whether we launched it."""
    return Case(
        When(kind=RunKind.EVALUATION, then=Value(RunKind.EVALUATION.value)),
        When(executor=EXTERNAL_EXECUTOR, then=Value(EXTERNAL_EXECUTOR)),
        default=Value(RunKind.TRAINING.value),
        output_field=TextField(),
    )


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
    )
}


def column(column_id: str) -> Column:
    """The column an id names; BadQuery says what ids look like."""
    if column_id in ATTRIBUTES:
        return ATTRIBUTES[column_id]
    kind, sep, key = column_id.partition(":")
    if not sep or not key or len(key) > MAX_KEY_LENGTH:
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


def default_column_ids(task: str | None) -> list[str]:
    """A team's table shows which experiment each run belongs to; an experiment's adds its task's
    validation accuracy."""
    from trainer.contract import REWARD_MEAN, val_key

    ids = ["name", "kind", "status", "health"]
    ids += ["preset", "task", "seed"] if task else ["experiment", "preset", "task", "seed"]
    ids += ["started", "duration", "steps", f"last:{REWARD_MEAN}", f"max:{REWARD_MEAN}"]
    if task:
        ids.append(f"last:{val_key(task)}")
    return [*ids, "tags"]


# -- the query ------------------------------------------------------------------------------------


@dataclass
class Filter:
    column_id: str
    op: str
    value: str
    error: str = ""


@dataclass
class TableQuery:
    sort: str = "-created"
    filters: list[Filter] = field(default_factory=list)
    group: str = ""
    archived: str = "hide"  # hide | include | only
    page: int = 1
    errors: list[str] = field(default_factory=list)

    def params(self, **changes: Any) -> list[tuple[str, str]]:
        """This query as URL parameters, with ``changes`` (sort=, group=, page=, filters=) applied."""
        sort = changes.get("sort", self.sort)
        group = changes.get("group", self.group)
        archived = changes.get("archived", self.archived)
        page = changes.get("page", 1)
        filters = changes.get("filters", self.filters)
        pairs: list[tuple[str, str]] = [("sort", sort)] if sort and sort != "-created" else []
        for item in filters:
            pairs += [("fc", item.column_id), ("fo", item.op), ("fv", item.value)]
        if group:
            pairs.append(("group", group))
        if archived != "hide":
            pairs.append(("archived", archived))
        if page and page != 1:
            pairs.append(("page", str(page)))
        return pairs

    def url(self, **changes: Any) -> str:
        return "?" + urlencode(self.params(**changes))


ARCHIVED_CHOICES = (("hide", "hide archived"), ("include", "include archived"), ("only", "only archived"))


def parse_query(params: Any) -> TableQuery:
    """The table's query from URL parameters (a QueryDict). Whatever does not parse is reported in
    ``errors`` (and kept on its filter, so the form shows it) instead of failing the page."""
    query = TableQuery()
    sort = params.get("sort") or "-created"
    try:
        column(sort.removeprefix("-"))
        query.sort = sort
    except BadQuery as error:
        query.errors.append(f"sort: {error}")
    fcs, fos, fvs = params.getlist("fc"), params.getlist("fo"), params.getlist("fv")
    for column_id, op, value in list(zip(fcs, fos, fvs, strict=False))[:MAX_FILTERS]:
        if not column_id or (not value and op not in ("eq", "ne")):
            continue  # an empty filter row of the form
        item = Filter(column_id, op, value)
        try:
            _filter_q(item, "probe")
        except BadQuery as error:
            item.error = str(error)
            query.errors.append(f"filter {column_id} {OPERATORS.get(op, op)} {value}: {error}")
        query.filters.append(item)
    group = params.get("group") or ""
    if group:
        try:
            if not column(group).groupable:
                raise BadQuery(f"runs cannot be grouped by {column(group).label}")
            query.group = group
        except BadQuery as error:
            query.errors.append(f"group: {error}")
    archived = params.get("archived") or "hide"
    query.archived = archived if archived in dict(ARCHIVED_CHOICES) else "hide"
    page = params.get("page") or "1"
    query.page = int(page) if page.isdigit() and int(page) > 0 else 1
    return query


def _filter_q(item: Filter, name: str) -> tuple[dict[str, Any], Q]:
    """(aliases to add, the condition on them) for one filter."""
    found = column(item.column_id)
    if item.op not in OPERATORS_FOR[found.value_type]:
        allowed = ", ".join(OPERATORS[op] for op in OPERATORS_FOR[found.value_type])
        raise BadQuery(f"{found.label} takes {allowed}")
    if found.value_type == JSON:
        return _json_filter(found, item, name)
    value = _typed(found, item.value)
    if found.value_type == TAGS:
        condition = Q(**{f"{name}__contains": [value]})
        return found.aliases(name), ~condition if item.op == "ne" else condition
    lookup = {"eq": "exact", "ne": "exact", "gt": "gt", "ge": "gte", "lt": "lt", "le": "lte", "contains": "icontains"}[item.op]  # fmt: skip
    condition = Q(**{f"{name}__{lookup}": value})
    if item.op == "ne":
        condition = ~condition | Q(**{f"{name}__isnull": True})
    return found.aliases(name), condition


def _json_filter(found: Column, item: Filter, name: str) -> tuple[dict[str, Any], Q]:
    if item.op == "contains":
        return found.text_aliases(name), Q(**{f"{name}__icontains": item.value})
    value = _json_value(item.value)
    if item.op in ("eq", "ne"):
        # "1" matches the number 1 and the string "1": the form cannot tell them apart.
        condition = Q(**{name: value}) | Q(**{name: item.value})
        return found.aliases(name), (
            ~condition | Q(**{f"{name}__isnull": True})
        ) if item.op == "ne" else condition
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise BadQuery(f"{OPERATORS[item.op]} compares numbers; {item.value!r} is not one")
    lookup = {"gt": "gt", "ge": "gte", "lt": "lt", "le": "lte"}[item.op]
    # jsonb orders every number above every string: only numbers may pass a numeric comparison.
    kind = Func(_config_value(found.key), function="jsonb_typeof", output_field=TextField())
    condition = Q(**{f"{name}_type": "number", f"{name}__{lookup}": value})
    return {**found.aliases(name), f"{name}_type": kind}, condition


def _json_value(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if not isinstance(value, dict | list) else text


DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)")


def _typed(found: Column, text: str) -> Any:
    text = text.strip()
    if found.value_type == NUMBER:
        try:
            value = float(text)
        except ValueError:
            raise BadQuery(f"{found.label} compares numbers; {text!r} is not one") from None
        if not math.isfinite(value):
            raise BadQuery(f"{found.label}: give a finite number")
        return value
    if found.value_type == TIME:
        return _parse_time(found, text)
    if found.value_type == DURATION:
        return _parse_duration(found, text)
    if found.value_type == STATUS:
        if text not in RunStatus.values:
            raise BadQuery(f"status is one of {', '.join(RunStatus.values)}")
        return text
    if found.value_type == KIND:
        if text not in RUN_KINDS:
            raise BadQuery(f"kind is one of {', '.join(RUN_KINDS)}")
        return text
    return text


def _parse_time(found: Column, text: str) -> datetime:
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise BadQuery(f"{found.label} takes a date or time like 2025-06-30 or 2025-06-30T14:00")
        moment = datetime(day.year, day.month, day.day)
    return moment if timezone.is_aware(moment) else moment.replace(tzinfo=UTC)


def _parse_duration(found: Column, text: str) -> timedelta:
    parts = DURATION_PART.findall(text.replace(" ", ""))
    if not parts or DURATION_PART.sub("", text.replace(" ", "")):
        raise BadQuery(f"{found.label} takes seconds or a length like 90s, 15m, 2h or 1h30m")
    unit = {"h": 3600, "m": 60, "s": 1, "": 1}
    return timedelta(seconds=sum(float(number) * unit[suffix] for number, suffix in parts))


# -- the table -------------------------------------------------------------------------------------


@dataclass
class Cell:
    column: Column
    value: Any
    text: str
    detail: str = ""  # a group's range, min to max


@dataclass
class Row:
    run: Run
    cells: list[Cell]


@dataclass
class GroupRow:
    value: Any
    text: str
    count: int
    cells: list[Cell]  # per shown column: its mean over the group (numeric columns only)
    filter_url: str | None


@dataclass
class HeaderCell:
    column: Column
    sort_url: str
    sorted: str  # "", "asc" or "desc"


@dataclass
class RunsTable:
    columns: list[Column]
    query: TableQuery
    header: list[HeaderCell]
    rows: list[Row] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    page: PageInfo | None = None
    total: int = 0
    group_column: Column | None = None

    @property
    def has_active(self) -> bool:
        return any(not row.run.is_terminal for row in self.rows)


def build(runs: QuerySet[Run], shown: Sequence[Column], query: TableQuery) -> RunsTable:
    """The page of rows (or the groups) the query asks for, with every shown column's value."""
    filtered = _filtered(runs, query)
    if query.group:  # a group row shows the means of the numeric columns
        shown = [item for item in shown if item.aggregated]
    table = RunsTable(list(shown), query, _header(shown, query))
    if query.group:
        table.group_column = column(query.group)
        table.groups = _groups(filtered, shown, query)
        table.total = sum(group.count for group in table.groups)
        return table
    # The shown columns never weigh on the sort and filter over every run: first the page's ids
    # and the number of matches, then the columns of those ids only.
    table.page, ids = _page_ids(filtered, _ordered(filtered, query), query.page, filtered=bool(query.filters))
    table.total = table.page.total
    table.rows = _rows(ids, shown)
    return table


@dataclass(frozen=True)
class PageInfo:
    number: int
    total: int

    @property
    def num_pages(self) -> int:
        return max(1, math.ceil(self.total / PAGE_SIZE))

    def has_previous(self) -> bool:
        return self.number > 1

    def has_next(self) -> bool:
        return self.number < self.num_pages

    def previous_page_number(self) -> int:
        return self.number - 1

    def next_page_number(self) -> int:
        return self.number + 1


def _page_ids(matching: QuerySet[Run], ordered: QuerySet[Run], number: int, *, filtered: bool) -> tuple[PageInfo, list[int]]:  # fmt: skip
    """The ids of page ``number`` (the last page when past the end) and how many runs match.

    Unfiltered, the newest-first index gives a page at once and the count is cheap; filtered, one
    scan with a window count beats scanning the filter twice (bench/bench_runs_table.py)."""
    window = slice((number - 1) * PAGE_SIZE, number * PAGE_SIZE)
    if filtered:
        rows = list(ordered.annotate(matches=Window(Count("pk"))).values_list("pk", "matches")[window])
        total = rows[0][1] if rows else None
        ids = [pk for pk, _matches in rows]
    else:
        ids = list(ordered.values_list("pk", flat=True)[window])
        total = matching.count()
    if not ids and number > 1:  # past the end: go to the last page
        total = matching.count() if total is None else total
        return (
            _page_ids(matching, ordered, max(1, math.ceil(total / PAGE_SIZE)), filtered=filtered)
            if total
            else (PageInfo(1, 0), [])
        )
    return PageInfo(number, total or 0), ids


def _rows(ids: list[int], shown: Sequence[Column]) -> list[Row]:
    names = {f"c{i}": item for i, item in enumerate(shown)}
    # The configs are large and no cell needs them whole (config columns are read in SQL).
    found = Run.objects.filter(pk__in=ids).select_related("experiment").defer("config", "experiment__config")
    for name, item in names.items():
        found = found.alias(**item.aliases(name)).annotate(**{f"{name}_v": F(name)})
    by_id = {run.pk: run for run in found}
    return [
        Row(run, [_cell(item, getattr(run, f"{name}_v")) for name, item in names.items()])
        for run in (by_id[pk] for pk in ids if pk in by_id)
    ]


def _filtered(runs: QuerySet[Run], query: TableQuery) -> QuerySet[Run]:
    if query.archived == "hide":
        runs = runs.filter(archived_at__isnull=True)
    elif query.archived == "only":
        runs = runs.filter(archived_at__isnull=False)
    for index, item in enumerate(query.filters):
        if item.error:
            continue
        aliases, condition = _filter_q(item, f"f{index}")
        runs = runs.alias(**aliases).filter(condition)
    return runs


def _ordered(runs: QuerySet[Run], query: TableQuery) -> QuerySet[Run]:
    descending = query.sort.startswith("-")
    by = column(query.sort.removeprefix("-"))
    if by.id == "created":  # the index's own order
        return runs.order_by("-created", "-id") if descending else runs.order_by("created", "id")
    runs = runs.alias(**by.aliases("s"))
    key = F("s").desc(nulls_last=True) if descending else F("s").asc(nulls_last=True)
    return runs.order_by(key, "-id")


def _groups(runs: QuerySet[Run], shown: Sequence[Column], query: TableQuery) -> list[GroupRow]:
    by = column(query.group)
    numeric = {f"c{i}": item for i, item in enumerate(shown) if item.aggregated}
    grouped = runs.annotate(**by.aliases("g"))
    aggregates: dict[str, Any] = {"n": Count("pk", distinct=True)}
    for name, item in numeric.items():
        grouped = grouped.alias(**item.aliases(name))
        aggregates |= {f"{name}_mean": Avg(name), f"{name}_min": Min(name), f"{name}_max": Max(name)}
    rows = grouped.values("g").annotate(**aggregates)  # type: ignore[misc]  # "g": an annotation
    ordered = sorted(rows, key=lambda row: (row["g"] is None, _sortable(row["g"])))
    groups = []
    for row in ordered:
        cells = [_group_cell(item, row, f"c{i}") for i, item in enumerate(shown)]
        link = None
        if row["g"] is not None:
            value = row["g"] if isinstance(row["g"], str) else json.dumps(row["g"])
            drill = [*query.filters, Filter(by.id, "eq", value)]
            link = query.url(group="", filters=drill)
        groups.append(GroupRow(row["g"], _text(by, row["g"]), row["n"], cells, link))
    return groups


def _group_cell(item: Column, row: Mapping[str, Any], name: str) -> Cell:
    if not item.aggregated:
        return Cell(item, None, "")
    mean, low, high = row[f"{name}_mean"], row[f"{name}_min"], row[f"{name}_max"]
    detail = f"{_text(item, low)} to {_text(item, high)}" if low is not None and low != high else ""
    return Cell(item, mean, _text(item, mean), detail)


def _sortable(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, int | float):
        return (0, value)
    return (2, str(value))


def _header(shown: Sequence[Column], query: TableQuery) -> list[HeaderCell]:
    cells = []
    for item in shown:
        state = "desc" if query.sort == f"-{item.id}" else "asc" if query.sort == item.id else ""
        # First click sorts numbers and times from the top down, text from A.
        first = item.id if item.value_type in (TEXT, STATUS, KIND, TAGS, JSON) else f"-{item.id}"
        target = {"desc": item.id, "asc": f"-{item.id}"}.get(state, first)
        cells.append(HeaderCell(item, query.url(sort=target), state))
    return cells


def _cell(item: Column, value: Any) -> Cell:
    return Cell(item, value, _text(item, value))


def _text(item: Column, value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if item.value_type == NUMBER:
        return _number(value)
    if item.value_type == TIME:
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M")
    if item.value_type == DURATION:
        return format_duration(value.total_seconds() if isinstance(value, timedelta) else float(value))
    if item.value_type == TAGS:
        return ", ".join(value)
    if item.value_type == JSON:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, int | float):
            return _number(value)
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return str(value)


def _number(value: Any) -> str:
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.4g}"


def format_duration(seconds: float) -> str:
    """1h 02m, 5m 07s, 42s: as precise as a glance needs."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 24:
        return f"{hours // 24}d {hours % 24:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


# -- what the column chooser offers ----------------------------------------------------------------


@functools.cache
def config_paths() -> list[str]:
    """Every RunConfig path, from the schema itself (a run's config always has all of them); no
    preset is built, so the first page of the table does not wait for the algorithms to import."""
    from trainer.config import field_paths

    return sorted(field_paths())


def metric_keys(run_ids: Sequence[int]) -> list[str]:
    from webapp.ingestion.models import MetricLatest

    names = MetricLatest.objects.filter(run_id__in=list(run_ids)).values_list("key__name", flat=True)
    return sorted(set(names))


def param_keys(run_ids: Sequence[int]) -> list[str]:
    keys = RunParam.objects.filter(run_id__in=list(run_ids)).values_list("key", flat=True)
    return sorted(set(keys))


def filterable(shown: Sequence[Column]) -> list[Column]:
    """Columns the filter form offers: the attributes and whatever else the table shows."""
    extra = [item for item in shown if item.kind != "attribute"]
    return [*ATTRIBUTES.values(), *extra]


def groupable(shown: Sequence[Column]) -> list[Column]:
    return [item for item in filterable(shown) if item.groupable]


# -- one page of the table for one user --------------------------------------------------------------


@dataclass
class TablePage:
    """Everything the runs table's template needs: the table and what its forms offer."""

    table: RunsTable
    experiment: Any  # the experiment the table is scoped to, or None for the whole team
    chosen: list[Column]  # the user's columns (a grouped table shows only the numeric ones)
    column_problems: list[str]
    metric_keys: list[str]
    param_keys: list[str]
    config_paths: list[str]

    @property
    def shown_ids(self) -> list[str]:
        return [item.id for item in self.chosen]

    @property
    def attributes(self) -> list[Column]:
        return list(ATTRIBUTES.values())

    @property
    def extra_columns(self) -> list[Column]:
        return [item for item in self.chosen if item.kind != "attribute"]

    @property
    def filter_columns(self) -> list[Column]:
        return filterable(self.chosen)

    @property
    def group_columns(self) -> list[Column]:
        return groupable(self.chosen)

    @property
    def filter_rows(self) -> list[Filter]:
        """The query's filters and one empty row to add another."""
        return [*self.table.query.filters, Filter("", "", "")]

    @property
    def operators(self) -> list[tuple[str, str]]:
        return list(OPERATORS.items())

    @property
    def archived_choices(self) -> tuple[tuple[str, str], ...]:
        return ARCHIVED_CHOICES

    @property
    def previous_url(self) -> str | None:
        page = self.table.page
        return (
            self.table.query.url(page=page.previous_page_number()) if page and page.has_previous() else None
        )

    @property
    def next_url(self) -> str | None:
        page = self.table.page
        return self.table.query.url(page=page.next_page_number()) if page and page.has_next() else None

    @property
    def metric_kinds(self) -> list[tuple[str, str]]:
        return [("last", "metric, latest"), ("max", "metric, max"), ("min", "metric, min"),
                ("config", "config value"), ("param", "MLflow param")]  # fmt: skip


def saved_column_ids(user: Any, team: Any, experiment: Any) -> list[str] | None:
    from webapp.results.models import LayoutKind, SavedLayout

    saved = SavedLayout.load(user, team, experiment, LayoutKind.RUNS_TABLE)
    ids = (saved or {}).get("columns")
    return [str(i) for i in ids] if isinstance(ids, list) else None


def save_column_ids(user: Any, team: Any, experiment: Any, ids: Sequence[str]) -> list[str]:
    """Keep the columns that parse; returns a message per id that does not."""
    from webapp.results.models import LayoutKind, SavedLayout

    found, problems = columns(ids)
    SavedLayout.store(user, team, experiment, LayoutKind.RUNS_TABLE, {"columns": [c.id for c in found]})
    return problems


def page_for(user: Any, team: Any, experiment: Any, params: Any) -> TablePage:
    """The runs table of a team (or of one experiment) as ``user`` arranged it, for URL ``params``."""
    ids = saved_column_ids(user, team, experiment)
    if ids is None:
        ids = default_column_ids(experiment.task if experiment is not None else None)
    shown, problems = columns(ids)
    runs = Run.objects.filter(team=team)
    if experiment is not None:
        runs = runs.filter(experiment=experiment)
    table = build(runs, shown, parse_query(params))
    on_page = [row.run.pk for row in table.rows]
    return TablePage(
        table, experiment, shown, problems, metric_keys(on_page), param_keys(on_page), list(config_paths())
    )
