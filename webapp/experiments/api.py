"""REST access to experiments and runs: list, read, launch, cancel. Personal API token; objects
outside the caller's teams are 404 and writes need the member role (403 for viewers)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ValidationError

from tasks_lib.registry import load_recipes
from trainer.backends import BACKENDS
from trainer.config import RunConfig, validation_errors
from trainer.contract import IDEMPOTENCY_HEADER
from trainer.registry import RegistryError
from webapp.accounts.access import get_team_for_user
from webapp.api import FieldError, Page, PageParams, StrictSchema, UserTokenAuth, paginate
from webapp.experiments import services
from webapp.experiments.access import get_experiment_for_user, get_run_for_user
from webapp.experiments.checks import refusals, with_dataset_rewards
from webapp.experiments.confine import ConfigRefused, confined
from webapp.experiments.models import Experiment, Run
from webapp.experiments.services import MAX_DESCRIPTION_LENGTH, MAX_SEEDS, Seed, creation_problems
from webapp.experiments.tasks import cancel_run

router = Router(auth=UserTokenAuth(), tags=["experiments and runs"])


class ExperimentOut(Schema):
    id: int
    name: str
    description: str
    task: str
    preset: str
    created: datetime
    config: dict[str, Any] = Field(description="The RunConfig every run of the experiment starts from.")


class RunOut(Schema):
    id: int
    experiment_id: int
    name: str
    seed: int
    status: str
    executor: str
    step: int
    total_steps: int
    progress: float
    message: str
    cancel_requested: bool
    created: datetime
    started_at: datetime | None
    finished_at: datetime | None
    external: bool = Field(description="Logged by an MLflow client through /mlflow/, not launched by us.")
    mlflow_run_id: str = Field(description="The run's id on the MLflow-compatible endpoint (MLFLOW_RUN_ID).")

    @staticmethod
    def resolve_external(obj: Run) -> bool:
        return obj.is_external


class RunDetailOut(RunOut):
    params: dict[str, str] = Field(description="Params logged through MLflow.")
    tags: dict[str, str] = Field(description="Tags set through MLflow.")

    @staticmethod
    def resolve_params(obj: Run) -> dict[str, str]:
        return dict(obj.params.values_list("key", "value"))

    @staticmethod
    def resolve_tags(obj: Run) -> dict[str, str]:
        return dict(obj.tags.values_list("key", "value"))


class RunFilters(Schema):
    status: str = Field("", max_length=20)
    experiment: int | None = Field(None, ge=1, le=2**63 - 1)


class ExperimentCreate(StrictSchema):
    config: dict[str, Any] = Field(
        description="RunConfig fields as JSON (trainer.config.RunConfig), nested or by dotted path: "
        "over the task recipe's defaults, over the preset's (grpo when it names none)."
    )
    seeds: list[Seed] = Field(
        default_factory=list,
        max_length=MAX_SEEDS,
        description=f"One run per seed (at most {MAX_SEEDS}, each different); empty: the config's seed.",
    )
    description: str = Field("", max_length=MAX_DESCRIPTION_LENGTH)


@router.get("/{team_slug}/experiments", response=Page[ExperimentOut], summary="The team's experiments")
def experiments(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    team = get_team_for_user(request, team_slug)
    return paginate(Experiment.objects.filter(team=team).order_by("-created", "-id"), paging)


@router.post("/{team_slug}/experiments", response={201: ExperimentOut}, summary="Create an experiment")
def create_experiment(request: HttpRequest, team_slug: str, body: ExperimentCreate) -> Any:
    team = get_team_for_user(request, team_slug, role="member")
    tasks = load_recipes()  # their defaults sit under the body's values (RunConfig.from_preset's rule)
    if len(set(body.seeds)) != len(body.seeds):
        raise FieldError([("seeds", "each seed may appear once")])
    try:
        config = confined(RunConfig.from_mapping(body.config))
        problems = creation_problems(config, tasks.names()) or BACKENDS.get(config.backend).check(config)
    except ConfigRefused as refused:
        raise FieldError(refused.problems, prefix="config.") from None
    except ValidationError as error:
        raise FieldError(_flat(validation_errors(error)), prefix="config.") from None
    except (ValueError, RegistryError) as error:
        raise HttpError(400, f"config: {error}") from None
    except ImportError as error:
        raise HttpError(
            400, f"config: backend {config.backend} cannot be checked on this server ({error})"
        ) from None
    if problems:
        raise FieldError(problems, prefix="config.")
    # Valid as a config, but naming what this team cannot use: it could never run (422, the field path).
    config = with_dataset_rewards(team, config)
    found = refusals(team, config)
    if found:
        raise FieldError(_flat(found), prefix="config.", status=422)
    try:
        experiment = services.create_experiment(
            team, request.user, config, body.seeds, description=body.description
        )
    except services.NameTaken as taken:
        raise HttpError(409, str(taken)) from None
    return Status(201, experiment)


def _flat(errors: dict[str, list[str]]) -> list[tuple[str, str]]:
    return [(path, message) for path, messages in errors.items() for message in messages]


@router.get("/{team_slug}/experiments/{int:pk}", response=ExperimentOut, summary="One experiment")
def experiment(request: HttpRequest, team_slug: str, pk: int) -> Experiment:
    return get_experiment_for_user(request, team_slug, pk)


@router.post(
    "/{team_slug}/experiments/{int:pk}/launch", response={202: list[RunOut], 409: dict}, summary="Launch"
)
def launch(request: HttpRequest, team_slug: str, pk: int, response: HttpResponse) -> Any:
    """One queued run per seed; the launcher (a Celery task) starts each. With an `Idempotency-Key`
    header (up to 64 letters, digits, `-`, `_`) the same key again answers the same runs, with
    `Idempotent-Replayed: true`. 409 while runs of the same seeds are still queued or running."""
    found = get_experiment_for_user(request, team_slug, pk, write=True)
    key = request.headers.get(IDEMPOTENCY_HEADER, "")
    if key and not services.LAUNCH_KEY.match(key):
        raise HttpError(400, f"{IDEMPOTENCY_HEADER}: up to 64 letters, digits, '-' or '_'")
    try:
        launched = services.launch_once(found, key)
    except services.LaunchRefused as refused:
        raise HttpError(409, str(refused)) from None
    except ConfigRefused as refused:  # a config stored before the server-path rules were
        raise FieldError(refused.problems, prefix="config.", status=409) from None
    if launched.replayed:
        response["Idempotent-Replayed"] = "true"
    return Status(202, launched.runs)


@router.get("/{team_slug}/runs", response=Page[RunOut], summary="The team's runs")
def runs(
    request: HttpRequest, team_slug: str, filters: Query[RunFilters], paging: Query[PageParams]
) -> dict[str, Any]:
    team = get_team_for_user(request, team_slug)
    chosen = Run.objects.filter(team=team)
    if filters.status:
        chosen = chosen.filter(status=filters.status)
    if filters.experiment is not None:
        chosen = chosen.filter(experiment_id=filters.experiment)
    return paginate(chosen.order_by("-created", "-id"), paging)


@router.get(
    "/{team_slug}/runs/{int:run_id}", response=RunDetailOut, summary="One run, with its params and tags"
)
def run(request: HttpRequest, team_slug: str, run_id: int) -> Run:
    return get_run_for_user(request, team_slug, run_id)


@router.post("/{team_slug}/runs/{int:run_id}/cancel", response=RunOut, summary="Cancel a run")
def cancel(request: HttpRequest, team_slug: str, run_id: int) -> Run:
    """A run that has not started is cancelled at once; a running one is asked to stop."""
    found = get_run_for_user(request, team_slug, run_id, write=True)
    if found.request_cancel(by=request.user) and not found.is_terminal:
        cancel_run.delay_on_commit(found.pk)
    return found
