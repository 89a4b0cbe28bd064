"""REST comparison of 2 to 8 runs (docs/runs-and-curves.md#compare-runs), as the compare page shows
them. Personal API token; a run outside the caller's team is 404, more than 8 runs a 400."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from webapp.accounts.access import get_team_for_user
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError
from webapp.experiments.access import get_runs_for_user
from webapp.results import run_compare
from webapp.results.run_compare import Comparison, RunColumn

router = Router(auth=UserTokenAuth(), tags=["results"])


class CompareQuery(Schema):
    runs: list[int] = Field(
        [],
        description=f"{run_compare.MIN_RUNS} to {run_compare.MAX_RUNS} run ids, repeated (?runs=1&runs=2).",
    )
    baseline: int | None = Field(
        None, description="The run the changes are measured against; default the first."
    )
    all: bool = Field(False, description="Every config value, not only those that differ.")


class ComparedRunOut(Schema):
    id: int
    name: str
    status: str
    steps: int
    duration_s: float | None
    generated_tokens: float | None
    health_firing: list[str] = Field(description="The labels of the health checks firing now.")

    @staticmethod
    def resolve_id(obj: RunColumn) -> int:
        return obj.run.pk

    @staticmethod
    def resolve_name(obj: RunColumn) -> str:
        return str(obj.run)

    @staticmethod
    def resolve_status(obj: RunColumn) -> str:
        return obj.run.status

    @staticmethod
    def resolve_duration_s(obj: RunColumn) -> float | None:
        return obj.summary.timing.duration_s

    @staticmethod
    def resolve_generated_tokens(obj: RunColumn) -> float | None:
        return obj.tokens

    @staticmethod
    def resolve_health_firing(obj: RunColumn) -> list[str]:
        return obj.firing


class MetricRowOut(Schema):
    label: str = Field(description="The metric key and which value: final or best.")
    values: list[float | None]
    changes: list[float | None] = Field(description="% change against the baseline run; null for it.")


class ConfigRowOut(Schema):
    path: str
    values: list[str]
    differs: bool


class ConfigSectionOut(Schema):
    name: str
    rows: list[ConfigRowOut]


class ComparisonOut(Schema):
    runs: list[ComparedRunOut]
    baseline: int = Field(description="The baseline run's id.")
    metrics: list[MetricRowOut]
    config: list[ConfigSectionOut]

    @staticmethod
    def resolve_runs(obj: Comparison) -> list[RunColumn]:
        return obj.columns

    @staticmethod
    def resolve_baseline(obj: Comparison) -> int:
        return obj.baseline_run.pk

    @staticmethod
    def resolve_config(obj: Comparison) -> list[run_compare.ConfigSection]:
        return obj.sections


@router.get("/{team_slug}/runs/compare", response=ComparisonOut, summary="Compare 2 to 8 runs")
def compare_runs(request: HttpRequest, team_slug: str, query: Query[CompareQuery]) -> Comparison:
    """Config differences by section, final and best results with their % change against the
    baseline, health, time and tokens of each run."""
    get_team_for_user(request, team_slug)
    ids = list(dict.fromkeys(query.runs))
    try:
        run_compare.check_count(len(ids))
    except run_compare.CompareRefused as refused:
        raise FieldError([("runs", str(refused))]) from None
    chosen = get_runs_for_user(request, team_slug, ids)
    baseline = ids.index(query.baseline) if query.baseline in ids else 0
    return run_compare.compare(chosen, baseline, only_different=not query.all)
