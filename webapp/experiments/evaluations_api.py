"""REST access to evaluation runs (docs/evaluations.md): create one, read one with its metrics, list
the team's. Personal API token; writes need the member role; the service is webapp.experiments.evaluations."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.accounts.access import get_team_for_user, team_objects
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, Page, PageParams, StrictSchema, newest_first
from webapp.experiments.access import get_run_for_user
from webapp.experiments.evaluations import (
    MAX_K,
    MAX_ROWS,
    MAX_TEMPERATURE,
    EvaluationRefused,
    EvaluationSettings,
    create_evaluation,
    default_split,
    eval_metrics,
    settings_of,
)
from webapp.experiments.models import Experiment, Run, RunKind

router = Router(auth=UserTokenAuth(), tags=["evaluations"])


class EvaluationCreate(StrictSchema):
    experiment: int = Field(ge=1, le=2**63 - 1, description="The experiment whose model is evaluated.")
    run: int | None = Field(
        None, ge=1, le=2**63 - 1, description="A run whose checkpoint is evaluated; none: the base model."
    )
    step: int | None = Field(None, ge=0, le=2**31 - 1, description="The checkpoint's step (with run).")
    dataset: str = Field(
        "",
        max_length=40,
        description="dataset:<id> to score; empty: the experiment's val split, else its train split.",
    )
    k: int = Field(1, ge=1, le=MAX_K, description="Samples per prompt.")
    max_rows: int | None = Field(None, ge=1, le=MAX_ROWS, description="Score at most this many rows.")
    temperature: float = Field(1.0, ge=0.0, le=MAX_TEMPERATURE)


class EvaluationOut(Schema):
    id: int
    experiment_id: int
    name: str
    status: str
    message: str
    step: int
    total_steps: int
    created: datetime
    finished_at: datetime | None
    evaluated_run_id: int | None = Field(
        description="The run whose checkpoint is evaluated; none: the base model."
    )
    evaluated_step: int | None
    settings: dict[str, Any] = Field(description="dataset, k, max_rows, temperature.")
    metrics: dict[str, float] = Field(
        description="eval/acc, eval/pass@1, eval/pass@k, eval/reward_mean, ... once done."
    )

    @staticmethod
    def resolve_settings(obj: Run) -> dict[str, Any]:
        return settings_of(obj)

    @staticmethod
    def resolve_metrics(obj: Run) -> dict[str, float]:
        return eval_metrics(obj)


@router.post(
    "/{team_slug}/evaluations",
    response={201: EvaluationOut},
    summary="Evaluate a checkpoint or the base model",
)
def create(request: HttpRequest, team_slug: str, body: EvaluationCreate) -> Any:
    """Queued at once; 422 names what could not run (a deleted checkpoint, a missing split)."""
    team = get_team_for_user(request, team_slug, role="member")
    experiment = get_object_or_404(Experiment, pk=body.experiment, team=team)
    source = get_object_or_404(Run, pk=body.run, team=team) if body.run is not None else None
    if source is not None and body.step is None:
        raise FieldError([("step", "a run's checkpoint is named by its step: set step")])
    settings = EvaluationSettings(
        body.dataset or default_split(experiment), body.k, body.max_rows, body.temperature
    )
    try:
        run = create_evaluation(experiment, request.user, settings, source=source, step=body.step)
    except EvaluationRefused as refused:
        raise FieldError(refused.problems, status=422) from None
    return Status(201, run)


class EvaluationFilters(FilterSchema):
    experiment: Annotated[int | None, FilterLookup("experiment_id")] = Field(None, ge=1, le=2**63 - 1)


@router.get("/{team_slug}/evaluations", response=Page[EvaluationOut], summary="The team's evaluations")
def evaluations(
    request: HttpRequest, team_slug: str, filters: Query[EvaluationFilters], paging: Query[PageParams]
) -> dict[str, Any]:
    chosen = filters.filter(team_objects(request, team_slug, Run).filter(kind=RunKind.EVALUATION))
    return newest_first(chosen.select_related("evaluated_run"), paging)


@router.get(
    "/{team_slug}/evaluations/{int:pk}", response=EvaluationOut, summary="One evaluation, with its metrics"
)
def evaluation(request: HttpRequest, team_slug: str, pk: int) -> Run:
    run = get_run_for_user(request, team_slug, pk)
    if not run.is_evaluation:
        raise HttpError(404, f"run {pk} is a training run, not an evaluation")
    return run
