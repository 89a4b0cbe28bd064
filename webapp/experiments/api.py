"""REST access to experiments and runs: list, read, launch, cancel. Personal API token; objects
outside the caller's teams are 404 and writes need the member role (403 for viewers)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Field, FilterLookup, FilterSchema, Query, Router, Schema, Status
from ninja.errors import HttpError

from trainer.config import RunConfig, flatten_paths
from trainer.contract import IDEMPOTENCY_HEADER, INT4_MAX
from webapp.accounts.access import get_team_for_user, team_objects
from webapp.accounts.models import Team
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, Page, PageParams, StrictSchema, newest_first
from webapp.datasets.models import DATASET_REF_PREFIX
from webapp.experiments import services
from webapp.experiments.acceptance import (
    MAX_DESCRIPTION_LENGTH,
    MAX_NAME_LENGTH,
    MAX_SEEDS,
    Refused,
    Seed,
    accept,
)
from webapp.experiments.access import get_experiment_for_user, get_run_for_user
from webapp.experiments.logs import TAIL_BYTES, log_tail
from webapp.experiments.models import LAUNCH_KEY, Experiment, LaunchRefused, NameTaken, Run, Unchangeable
from webapp.experiments.tasks import cancel_run
from webapp.retention.accounting import storage_of
from webapp.retention.checkpoint_policy import KeepPolicy
from webapp.retention.schemas import CheckpointPolicyIn, RetentionIn, StorageOut

# What the experiment form opens with when no model is chosen (the built-in, offline one).
DEFAULT_MODEL = "smollm2-135m-instruct"

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
    config: dict[str, Any] = Field(
        description="The frozen RunConfig it trains with ({} for an external run)."
    )
    params: dict[str, str] = Field(description="Params logged through MLflow.")
    tags: dict[str, str] = Field(description="Tags set through MLflow.")
    storage: StorageOut = Field(description="Its retention policy and what its trajectories take.")

    @staticmethod
    def resolve_storage(obj: Run) -> Any:
        return storage_of(obj)

    @staticmethod
    def resolve_params(obj: Run) -> dict[str, str]:
        return dict(obj.logged.params().values_list("key", "value"))

    @staticmethod
    def resolve_tags(obj: Run) -> dict[str, str]:
        return dict(obj.logged.tags().values_list("key", "value"))


class RunFilters(FilterSchema):
    status: str = Field("", max_length=20)
    experiment: Annotated[int | None, FilterLookup("experiment_id")] = Field(None, ge=1, le=2**63 - 1)
    q: str = Field("", max_length=200, description="Only runs whose name holds this text (any case).")

    def filter_status(self, value: str) -> Q:
        return Q(status=value) if value else Q()

    def filter_q(self, value: str) -> Q:
        # A NUL in it never reaches here: webapp.middleware.NoNulInQueryMiddleware answers 400 first.
        return Q(name__icontains=value) if value else Q()


class ExperimentCreate(StrictSchema):
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="RunConfig fields as JSON (trainer.config.RunConfig), nested or by dotted path: "
        "over the task recipe's defaults, over the preset's (grpo when it names none).",
    )
    preset: str | None = Field(None, max_length=50, description="Shortcut for config.preset.")
    task: str | None = Field(None, max_length=100, description="Shortcut for config.task.")
    dataset: int | None = Field(
        None, ge=1, le=2**63 - 1, description="Shortcut for config.data.train_path: a dataset's id."
    )
    val_dataset: int | None = Field(
        None, ge=1, le=2**63 - 1, description="Shortcut for config.data.val_path."
    )
    name: str | None = Field(
        None, max_length=MAX_NAME_LENGTH, description="Shortcut for config.name; none: task, preset and time."
    )
    seeds: list[Seed] = Field(
        default_factory=list,
        max_length=MAX_SEEDS,
        description=f"One run per seed (at most {MAX_SEEDS}, each different); empty: the config's seed.",
    )
    description: str = Field("", max_length=MAX_DESCRIPTION_LENGTH)
    retention: RetentionIn | None = Field(
        None, description="Which trajectories its runs store (docs/rollouts.md#retention); none: all."
    )
    checkpoint_policy: CheckpointPolicyIn | None = Field(
        None, description="Which checkpoints its runs keep on disk (docs/checkpoints.md#keep-policies)."
    )

    def mapping(self) -> dict[str, Any]:
        """The config with the shortcuts filled in where it does not say: only preset, task and
        dataset are needed; the model is the built-in one and the name says what and when."""
        chosen = flatten_paths(self.config)
        shortcuts = {
            "preset": self.preset,
            "task": self.task,
            "name": self.name,
            "data.train_path": f"{DATASET_REF_PREFIX}{self.dataset}" if self.dataset else None,
            "data.val_path": f"{DATASET_REF_PREFIX}{self.val_dataset}" if self.val_dataset else None,
        }
        for path, value in shortcuts.items():
            if value is not None:
                chosen.setdefault(path, value)
        chosen.setdefault("model.path", DEFAULT_MODEL)
        if "name" not in chosen:
            stamp = timezone.now().strftime("%Y-%m-%d %H:%M:%S.%f")
            chosen["name"] = f"{chosen.get('task', 'run')} {chosen.get('preset', 'grpo')} {stamp}"
        return chosen


class ExperimentChange(StrictSchema):
    """Only the fields to change. The config (and seeds) may change only while no run was launched:
    runs keep the config they were launched with, so change a clone instead."""

    name: str | None = Field(None, min_length=1, max_length=MAX_NAME_LENGTH)
    description: str | None = Field(None, max_length=MAX_DESCRIPTION_LENGTH)
    config: dict[str, Any] | None = Field(None, description="RunConfig fields over the current config.")
    seeds: list[Seed] | None = Field(None, max_length=MAX_SEEDS)


class ExperimentClone(StrictSchema):
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME_LENGTH, description="None: '… (clone)'.")
    config: dict[str, Any] = Field(default_factory=dict, description="RunConfig fields over the source's.")


@router.get("/{team_slug}/experiments", response=Page[ExperimentOut], summary="The team's experiments")
def experiments(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    return newest_first(team_objects(request, team_slug, Experiment), paging)


@router.post("/{team_slug}/experiments", response={201: ExperimentOut}, summary="Create an experiment")
def create_experiment(request: HttpRequest, team_slug: str, body: ExperimentCreate) -> Any:
    """Only `preset`, `task` and `dataset` are needed; everything else comes from the preset's and
    the task's defaults (docs/api.md#experiments)."""
    team = get_team_for_user(request, team_slug, role="member")
    if len(set(body.seeds)) != len(body.seeds):
        raise FieldError([("seeds", "each seed may appear once")])
    config = accepted(team, body.mapping())
    retention = body.retention.policy() if body.retention is not None else None
    keep = body.checkpoint_policy.policy() if body.checkpoint_policy is not None else KeepPolicy()
    if keep.problems(config):
        raise FieldError(keep.problems(config), prefix="checkpoint_policy.", status=422)
    return _created(
        team, request, config, keep, body.seeds, description=body.description, retention=retention
    )


def _created(
    team: Team, request: HttpRequest, config: RunConfig, keep: KeepPolicy, seeds: list[int], **fields: Any
) -> Status:
    """A new experiment with its checkpoint keep-policy, answered 201 (409 when its name is taken)."""
    with answer_conflicts():
        made = Experiment.create(team, request.user, keep.trainer_config(config), seeds, **fields)
    keep.save_for(made)
    return Status(201, made)


def accepted(team: Any, mapping: dict[str, Any]) -> RunConfig:
    """The config accept returns; its refusals as the API's FieldError on ``config.<path>``: 400 not a
    valid config, 422 a valid one naming what this team cannot use (docs/api.md#errors)."""
    try:
        return accept(team, mapping)
    except Refused as refused:
        raise FieldError(refused.problems, prefix="config.", status=422 if refused.valid else 400) from None


@contextmanager
def answer_conflicts() -> Iterator[None]:
    """A model call refused by the state it finds: 409, its message."""
    try:
        yield
    except (NameTaken, Unchangeable, LaunchRefused) as conflict:
        raise HttpError(409, str(conflict)) from None


@router.get("/{team_slug}/experiments/{int:pk}", response=ExperimentOut, summary="One experiment")
def experiment(request: HttpRequest, team_slug: str, pk: int) -> Experiment:
    return get_experiment_for_user(request, team_slug, pk)


@router.patch("/{team_slug}/experiments/{int:pk}", response=ExperimentOut, summary="Change an experiment")
def change_experiment(request: HttpRequest, team_slug: str, pk: int, body: ExperimentChange) -> Experiment:
    found = get_experiment_for_user(request, team_slug, pk, write=True)
    changes_config = body.config is not None or body.seeds is not None
    if changes_config and found.frozen_because():
        raise HttpError(409, found.frozen_because())
    if body.seeds is not None and len(set(body.seeds)) != len(body.seeds):
        raise FieldError([("seeds", "each seed may appear once")])
    config = None
    if not found.external and (body.config is not None or body.name is not None):
        mapping = {**flatten_paths(found.config), **flatten_paths(body.config or {})}
        mapping.update({"name": body.name} if body.name is not None else {})
        config = accepted(found.team, mapping)
    with answer_conflicts():
        found.change(config=config, name=body.name, description=body.description, seeds=body.seeds)
    return found


@router.post(
    "/{team_slug}/experiments/{int:pk}/clone", response={201: ExperimentOut}, summary="Clone an experiment"
)
def clone_experiment(request: HttpRequest, team_slug: str, pk: int, body: ExperimentClone) -> Any:
    """A new experiment with the source's config (and `config` over it), seeds and description."""
    source = get_experiment_for_user(request, team_slug, pk, write=True)
    if source.external:
        raise HttpError(409, f"{source.name} was logged through MLflow: it has no config to clone")
    mapping = flatten_paths(source.config)
    mapping.update(flatten_paths(body.config))
    mapping["name"] = body.name or f"{source.name} (clone)"[:MAX_NAME_LENGTH]
    config = accepted(source.team, mapping)
    keep = KeepPolicy.of_experiment(source.pk) or KeepPolicy()  # a clone keeps its source's
    return _created(
        source.team, request, config, keep, source.seeds, description=source.description, cloned_from=source
    )


@router.delete(
    "/{team_slug}/experiments/{int:pk}", response={204: None, 409: dict}, summary="Delete an experiment"
)
def delete_experiment(request: HttpRequest, team_slug: str, pk: int) -> Any:
    """With all its runs and what they produced; 409 while a run of it is active (cancel it first)."""
    found = get_experiment_for_user(request, team_slug, pk, write=True)
    if not services.delete_experiment(found):
        raise HttpError(409, f"{found.name} has active runs: cancel them first")
    return Status(204, None)


@router.post(
    "/{team_slug}/experiments/{int:pk}/launch", response={202: list[RunOut], 409: dict}, summary="Launch"
)
def launch(request: HttpRequest, team_slug: str, pk: int, response: HttpResponse) -> Any:
    """One queued run per seed; the launcher (a Celery task) starts each. With an `Idempotency-Key`
    header (up to 64 letters, digits, `-`, `_`) the same key again answers the same runs, with
    `Idempotent-Replayed: true`. 409 while runs of the same seeds are still queued or running, or
    when its stored config is no longer accepted (a dataset deleted since), naming the field."""
    found = get_experiment_for_user(request, team_slug, pk, write=True)
    key = request.headers.get(IDEMPOTENCY_HEADER, "")
    if key and not LAUNCH_KEY.match(key):
        raise HttpError(400, f"{IDEMPOTENCY_HEADER}: up to 64 letters, digits, '-' or '_'")
    try:
        with answer_conflicts():
            launched = found.launch(key)
    except Refused as refused:
        raise FieldError(refused.problems, prefix="config.", status=409) from None
    if launched.replayed:
        response["Idempotent-Replayed"] = "true"
    return Status(202, launched.runs)


@router.get("/{team_slug}/runs", response=Page[RunOut], summary="The team's runs")
def runs(
    request: HttpRequest, team_slug: str, filters: Query[RunFilters], paging: Query[PageParams]
) -> dict[str, Any]:
    return newest_first(filters.filter(team_objects(request, team_slug, Run)), paging)


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


@router.delete("/{team_slug}/runs/{int:run_id}", response={204: None, 409: dict}, summary="Delete a run")
def delete_run(request: HttpRequest, team_slug: str, run_id: int) -> Any:
    """With its metrics, trajectories, logs and files; 409 while it is active (cancel it first)."""
    found = get_run_for_user(request, team_slug, run_id, write=True)
    deleted, _active = Run.objects.filter(pk=found.pk).delete_finished()
    if not deleted:
        raise HttpError(409, f"run {found.pk} is {found.status}: cancel it first")
    return Status(204, None)


class LogParams(Schema):
    after: int = Field(-1, ge=-1, le=INT4_MAX, description="Only the chunks after this sequence number.")
    max_bytes: int = Field(TAIL_BYTES, ge=1, le=10 * TAIL_BYTES)


class LogsOut(Schema):
    text: str = Field(description="The log's tail (at most `max_bytes`), or what came after `after`.")
    next_after: int = Field(
        description="The last chunk's sequence number: pass as `after` to follow the log."
    )
    status: str = Field(description="The run's status: stop following once it is terminal.")


@router.get("/{team_slug}/runs/{int:run_id}/logs", response=LogsOut, summary="The run's log")
def run_logs(
    request: HttpRequest,
    team_slug: str,
    run_id: int,
    params: Query[LogParams],
) -> dict[str, Any]:
    """What the trainer sent (chunked), else what its executor kept; `after` follows the sent log."""
    after, max_bytes = params.after, params.max_bytes
    found = get_run_for_user(request, team_slug, run_id)
    chunks = found.log_chunks.all()  # the run's relation: ingestion sits above (docs/architecture.md#layers)
    last = chunks.order_by("-seq").values_list("seq", flat=True).first()
    if after >= 0:
        text = "".join(chunks.filter(seq__gt=after).order_by("seq").values_list("text", flat=True)[:1000])
    else:
        text = log_tail(found, max_bytes)
    return {"text": text[-max_bytes:], "next_after": -1 if last is None else last, "status": found.status}
