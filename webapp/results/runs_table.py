"""The runs table: one row per run of a team or an experiment, sorted, filtered, grouped and paged in
SQL, so the first page stays fast at 10,000 runs (bench/bench_runs_table.py). Its columns are
webapp.results.runs_columns, its query webapp.results.runs_filters, one user's page of it
webapp.results.runs_page."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import (
    Avg,
    Count,
    F,
    Max,
    Min,
    QuerySet,
    Window,
)
from django.utils import timezone

from webapp.experiments.models import Run
from webapp.results.runs_columns import (
    DURATION,
    JSON,
    KIND,
    NUMBER,
    STATUS,
    TAGS,
    TEXT,
    TIME,
    Column,
    column,
    import_source,
)
from webapp.results.runs_filters import PAGE_SIZE, Filter, TableQuery, filter_q


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


def _page_ids(
    matching: QuerySet[Run], ordered: QuerySet[Run], number: int, *, filtered: bool
) -> tuple[PageInfo, list[int]]:
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
    found = found.annotate(import_source=import_source())  # the name cell marks an imported run
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
        aliases, condition = filter_q(item, f"f{index}")
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
