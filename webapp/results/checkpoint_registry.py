"""The team's checkpoint registry (docs/checkpoints.md#the-registry): every checkpoint of every run of
the team in one table, filtered and sorted by what the query string says, a page at a time, each with
its evaluation scores per split and the tags members put on it.

The query is built here, the page is ``registry_views``; only the team's own runs are ever read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet, Sum

from trainer.contract import EVAL_ACC
from webapp.accounts.models import Team
from webapp.experiments.evaluations import dataset_names, settings_of
from webapp.experiments.models import Run, RunKind, RunStatus
from webapp.ingestion.metrics_store import latest_points
from webapp.ingestion.models import MAX_CHECKPOINT_TAG, POLICY_DELETED, Checkpoint

PAGE_SIZE = 25
# Sort name → the ordering it means; the first is the default.
SORTS: dict[str, tuple[str, ...]] = {
    "newest": ("-received", "-pk"),
    "oldest": ("received", "pk"),
    "step": ("-step", "-pk"),
    "size": ("-size_bytes", "-pk"),
    "run": ("-run_id", "-step"),
}
STATES = {"": "kept and deleted", "kept": "kept", "deleted": "deleted"}


@dataclass(frozen=True)
class RegistryQuery:
    """What the filter form asks for; anything it does not understand is left out."""

    experiment: int | None = None
    run: int | None = None
    tag: str = ""
    state: str = ""
    sort: str = "newest"
    page: str = "1"

    @classmethod
    def of(cls, params: Mapping[str, str]) -> RegistryQuery:
        def number(name: str) -> int | None:
            value = params.get(name, "")
            return int(value) if value.isdigit() and len(value) <= 18 else None

        return cls(
            experiment=number("experiment"),
            run=number("run"),
            tag=params.get("tag", "").strip()[:MAX_CHECKPOINT_TAG],
            state=params.get("state", "") if params.get("state", "") in STATES else "",
            sort=params.get("sort", "") if params.get("sort", "") in SORTS else "newest",
            page=params.get("page", "1"),
        )

    def query_string(self, page: int) -> str:
        """This query at another page, as a link's query string."""
        chosen = {"experiment": self.experiment, "run": self.run, "tag": self.tag, "state": self.state}
        kept = {name: value for name, value in chosen.items() if value not in (None, "")}
        return urlencode({**kept, "sort": self.sort, "page": page})

    def filtered(self, team: Team) -> QuerySet[Checkpoint]:
        chosen = Checkpoint.objects.filter(run__team=team)
        if self.experiment is not None:
            chosen = chosen.filter(run__experiment_id=self.experiment)
        if self.run is not None:
            chosen = chosen.filter(run_id=self.run)
        if self.tag:
            chosen = chosen.filter(tags__contains=[self.tag])
        if self.state:
            chosen = chosen.filter(deleted=self.state == "deleted")
        return chosen


@dataclass
class RegistryRow:
    checkpoint: Checkpoint
    scores: list[tuple[str, float | None, Run]] = field(default_factory=list)  # (split, eval/acc, evaluation)


def registry_page(team: Team, query: RegistryQuery) -> tuple[Page[Checkpoint], list[RegistryRow]]:
    chosen = (
        query.filtered(team)
        .select_related("run", "run__experiment", "run__team")
        .order_by(*SORTS[query.sort])
    )
    page = Paginator(chosen, PAGE_SIZE).get_page(query.page)
    checkpoints = list(page.object_list)
    scores = _scores(team, checkpoints)
    return page, [RegistryRow(c, scores.get((c.run_id, c.step), [])) for c in checkpoints]


def _scores(
    team: Team, checkpoints: list[Checkpoint]
) -> dict[tuple[int, int], list[tuple[str, float | None, Run]]]:
    """(run, step) → the latest evaluation of that checkpoint on each split, with its eval/acc."""
    wanted = {(c.run_id, c.step) for c in checkpoints}
    evaluations = Run.objects.filter(
        team=team, kind=RunKind.EVALUATION, evaluated_run_id__in={run for run, _ in wanted}
    ).order_by("created", "pk")
    latest: dict[tuple[int, int, str], Run] = {}
    for evaluation in evaluations:
        key = (evaluation.evaluated_run_id or 0, evaluation.evaluated_step or 0)
        if key in wanted:
            split = str(settings_of(evaluation)["dataset"])
            earlier = latest.get((*key, split))
            if (
                earlier is None
                or evaluation.status == RunStatus.SUCCEEDED
                or earlier.status != RunStatus.SUCCEEDED
            ):
                latest[(*key, split)] = evaluation
    points = latest_points([run.pk for run in latest.values()])
    acc = {pk: next((v for k, v, _ts, _s in rows if k == EVAL_ACC), None) for pk, rows in points.items()}
    names = dataset_names({split for _, _, split in latest})
    found: dict[tuple[int, int], list[tuple[str, float | None, Run]]] = {}
    for (run_id, step, split), evaluation in sorted(latest.items()):
        found.setdefault((run_id, step), []).append(
            (names.get(split, split), acc.get(evaluation.pk), evaluation)
        )
    return found


def totals(team: Team, query: RegistryQuery) -> dict[str, Any]:
    """What the filtered checkpoints take on disk and what deleting the others saved."""
    chosen = query.filtered(team)
    return chosen.aggregate(
        kept_count=Count("pk", filter=Q(deleted=False)),
        kept_bytes=Sum("size_bytes", filter=Q(deleted=False), default=0),
        deleted_count=Count("pk", filter=Q(deleted=True)),
        saved_bytes=Sum("size_bytes", filter=Q(deleted=True), default=0),
        policy_saved_bytes=Sum(
            "size_bytes", filter=Q(deleted=True, deleted_by__startswith=POLICY_DELETED), default=0
        ),
    )


def team_tags(team: Team) -> list[str]:
    """Every tag the team's checkpoints carry, for the filter's choices."""
    tags = Checkpoint.objects.filter(run__team=team).exclude(tags=[]).values_list("tags", flat=True)
    return sorted({tag for listed in tags for tag in listed})
