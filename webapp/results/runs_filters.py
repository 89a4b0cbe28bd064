"""The runs table's query, as it travels in the URL (docs/runs-and-curves.md#the-runs-table): the sort, the
filters, the grouping, which archived runs show, the page; and each filter as an SQL condition on its
column's value."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Func,
    Q,
    TextField,
)
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from trainer.contract import INT4_MAX
from webapp.experiments.models import RunStatus
from webapp.results.runs_columns import (
    DURATION,
    JSON,
    KIND,
    LOOKUPS,
    MAX_COLUMNS,
    NUMBER,
    OPERATORS,
    OPERATORS_FOR,
    RUN_KINDS,
    STATUS,
    TAGS,
    TIME,
    BadQuery,
    Column,
    column,
    config_value,
)

MAX_FILTERS = 12
PAGE_SIZE = 50  # rows of the table a page shows
MAX_PAGE = INT4_MAX // PAGE_SIZE  # so that a page's offset fits the database's integers


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
    # The shown columns' ids: those the URL names (``col``), else the page fills in the user's, so
    # every link the table makes carries them and a shared link shows the same columns to anyone.
    columns: list[str] = field(default_factory=list)
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
        return pairs + [("col", column_id) for column_id in changes.get("columns", self.columns)]

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
            filter_q(item, "probe")
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
    query.columns = [column_id for column_id in params.getlist("col") if column_id][:MAX_COLUMNS]
    archived = params.get("archived") or "hide"
    query.archived = archived if archived in dict(ARCHIVED_CHOICES) else "hide"
    page = params.get("page") or "1"
    query.page = int(page) if page.isdigit() and 0 < int(page) <= MAX_PAGE else 1
    if page.isdigit() and int(page) > MAX_PAGE:
        query.errors.append(f"page: at most {MAX_PAGE}")
    return query


def filter_q(item: Filter, name: str) -> tuple[dict[str, Any], Q]:
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
    condition = Q(**{f"{name}__{LOOKUPS[item.op]}": value})
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
    lookup = LOOKUPS[item.op]
    # jsonb orders every number above every string: only numbers may pass a numeric comparison.
    kind = Func(config_value(found.key), function="jsonb_typeof", output_field=TextField())
    condition = Q(**{f"{name}_type": "number", f"{name}__{lookup}": value})
    return {**found.aliases(name), f"{name}_type": kind}, condition


def _json_value(text: str) -> Any:
    try:
        value = json.loads(text, parse_constant=_not_finite)
    except BadQuery:
        raise
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):  # 1e309 parses as an infinity
        _not_finite(text)
    return value if not isinstance(value, dict | list) else text


def _not_finite(text: str) -> Any:
    # jsonb holds no NaN or infinity, so no config value equals one, and none compares with one.
    raise BadQuery(f"{text} is not a value a config holds: give a finite number")


DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([hms]?)")
MAX_DURATION_S = 1000 * 365 * 24 * 3600  # far beyond any run, well inside timedelta's and Postgres's range


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
    seconds = sum(float(number) * unit[suffix] for number, suffix in parts)
    if seconds > MAX_DURATION_S:
        raise BadQuery(f"{found.label} is at most {MAX_DURATION_S // (3600 * 24 * 365)} years")
    return timedelta(seconds=seconds)
