"""One user's page of the runs table: the table with the columns that user chose (saved per team or
experiment), and what its forms offer (docs/runs-and-curves.md#the-runs-table)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from webapp.results.runs_filters import ARCHIVED_CHOICES, Filter, parse_query
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
    saved = SavedLayout.load(user, team, experiment, LayoutKind.RUNS_TABLE)
    ids = (saved or {}).get("columns")
    return [str(i) for i in ids] if isinstance(ids, list) else None


def save_column_ids(user: Any, team: Any, experiment: Any, ids: Sequence[str]) -> list[str]:
    """Keep the columns that parse; returns a message per id that does not."""
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
