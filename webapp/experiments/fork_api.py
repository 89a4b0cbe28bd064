"""REST: fork a run's checkpoint into a new experiment (docs/checkpoints.md#fork). Personal API
token; the member role, as for any experiment made."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Status

from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import StrictSchema
from webapp.experiments.acceptance import MAX_NAME_LENGTH
from webapp.experiments.access import get_run_for_user
from webapp.experiments.api import ExperimentOut, accepted, answer_conflicts
from webapp.experiments.fork import fork_mapping
from webapp.experiments.models import Experiment

router = Router(auth=UserTokenAuth(), tags=["experiments and runs"])


class RunFork(StrictSchema):
    step: int | None = Field(None, ge=0, description="The checkpoint's step; none: the run's latest one.")
    name: str | None = Field(
        None, min_length=1, max_length=MAX_NAME_LENGTH, description="None: '… · fork of run N at step S'."
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="RunConfig fields over the run's experiment's config (optim.lr, algorithm.*, data.*, ...); "
        "start_from.optimizer: true keeps the checkpoint's optimiser state.",
    )


@router.post(
    "/{team_slug}/runs/{int:run_id}/fork",
    response={201: ExperimentOut},
    summary="Fork a run's checkpoint into a new experiment",
)
def fork_run(request: HttpRequest, team_slug: str, run_id: int, body: RunFork) -> Any:
    """A new experiment, not launched, whose run starts from the checkpoint's weights (and, with
    start_from.optimizer, its optimiser state); launch it with POST .../experiments/{id}/launch."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    mapping = fork_mapping(run, body.step, body.config)
    if body.name is not None:
        mapping["name"] = body.name
    config = accepted(run.team, mapping)
    with answer_conflicts():
        made = Experiment.create(
            run.team,
            request.user,
            config,
            [config.trainer.seed],
            description=f"Forked from run {run.pk} ({run.name}).",
        )
    return Status(201, made)
