"""One user's page of the runs table: the table with the columns that user chose (saved per team or
experiment), and what its forms offer (docs/runs-and-curves.md#the-runs-table)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from webapp.experiments.models import Run
from webapp.results.models import LayoutKind, SavedLayout
from webapp.results.runs_columns import (
    ATTRIBUTES,
    OPERATORS,
    Column,
    columns,
    config_paths,
    default_column_ids,
    filterable,
    groupable,
    metric_keys,
    param_keys,
)
from webapp.results.runs_filters import ARCHIVED_CHOICES, Filter, TableQuery, parse_query
from webapp.results.runs_table import RunsTable, build


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
        """The shown columns, and those the query filters on even when not shown (a shared link's)."""
        filtered, _problems = columns([item.column_id for item in self.table.query.filters])
        return filterable([*self.chosen, *(item for item in filtered if item not in self.chosen)])

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
    def view_url(self) -> str:
        """This very view (its page too), to share or bookmark."""
        return self.table.query.url(page=self.table.page.number if self.table.page else 1)

    @property
    def next_url(self) -> str | None:
        page = self.table.page
        return self.table.query.url(page=page.next_page_number()) if page and page.has_next() else None

    @property
    def metric_kinds(self) -> list[tuple[str, str]]:
        return [("last", "metric, latest"), ("max", "metric, max"), ("min", "metric, min"),
                ("config", "config value"), ("param", "MLflow param")]  # fmt: skip


def saved_column_ids(user: Any, team: Any, experiment: Any) -> list[str] | None:
    saved = SavedLayout.load(user, team, experiment, LayoutKind.RUNS_TABLE)
    ids = (saved or {}).get("columns")
    return [str(i) for i in ids] if isinstance(ids, list) else None


def save_column_ids(user: Any, team: Any, experiment: Any, ids: Sequence[str]) -> list[str]:
    """Keep the columns that parse; returns a message per id that does not."""
    found, problems = columns(ids)
    SavedLayout.store(user, team, experiment, LayoutKind.RUNS_TABLE, {"columns": [c.id for c in found]})
    return problems


def with_columns(url: str, ids: Sequence[str]) -> str:
    """``url`` (a page of the table) showing the columns ``ids``: the URL's own ``col`` give way, or
    the table would show those and not the ones just saved."""
    parts = urlsplit(url)
    kept = [(key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key != "col"]
    query = urlencode([*kept, *(("col", column_id) for column_id in ids)])
    return urlunsplit(parts._replace(query=query))


def column_ids_for(user: Any, team: Any, experiment: Any, query: TableQuery) -> list[str]:
    """The columns the URL names, else the ones ``user`` saved, else the defaults."""
    if query.columns:
        return query.columns
    saved = saved_column_ids(user, team, experiment)
    return saved if saved is not None else default_column_ids(experiment.task if experiment else None)


def page_for(user: Any, team: Any, experiment: Any, params: Any) -> TablePage:
    """The runs table of a team (or of one experiment) as ``user`` arranged it, or as the URL
    ``params`` name it: the URL holds the whole view (docs/runs-and-curves.md#sharing-a-view)."""
    query = parse_query(params)
    shown, problems = columns(column_ids_for(user, team, experiment, query))
    query.columns = [item.id for item in shown]
    runs = Run.objects.filter(team=team)
    if experiment is not None:
        runs = runs.filter(experiment=experiment)
    table = build(runs, shown, query)
    on_page = [row.run.pk for row in table.rows]
    return TablePage(
        table, experiment, shown, problems, metric_keys(on_page), param_keys(on_page), list(config_paths())
    )
