"""The playground over the REST API (docs/playground.md#rest): start a session, follow its answers.
Personal API token; starting one needs a member's write access."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.responses import Status

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, StrictSchema
from webapp.experiments.models import Experiment
from webapp.playground import services
from webapp.playground.access import get_session_for_user
from webapp.playground.models import PlaygroundAnswer, PlaygroundSession

router = Router(auth=UserTokenAuth(), tags=["playground"])


class PlaygroundIn(StrictSchema):
    experiment: int
    models: list[str] = Field(
        description="One or two of `base` (the experiment's starting weights) and `<run id>:<step>` "
        "(a checkpoint still on disk)."
    )
    prompt: str = Field(default="", max_length=20_000, description="The user's message; or name a row.")
    ground_truth: str = Field(default="", max_length=2_000, description="Scores a typed prompt's answers.")
    split: str = Field(default="train", pattern="^(train|val)$")
    row_index: int | None = Field(default=None, ge=0, description="A row of the experiment's dataset.")
    tools: list[str] | None = Field(default=None, description="Some of the experiment's tools; none: all.")


class AnswerOut(Schema):
    model: str = Field(description="`base` or `<run id>:<step>`.")
    label: str
    status: str = Field(description="queued, running, done or failed")
    steps: list[dict[str, Any]] = Field(
        description="Each step's response, tool calls (with results), tokens."
    )
    stop_reason: str = Field(description="done, max_steps, response_budget, time_budget or prompt_too_long")
    reward: float | None
    response_tokens: int
    message: str

    @staticmethod
    def resolve_model(obj: PlaygroundAnswer) -> str:
        return obj.choice


class SessionOut(Schema):
    id: int
    experiment: int
    status: str = Field(description="The session's job: queued, running, done or failed.")
    prompt: str
    tools: list[str]
    budget: dict[str, Any]
    answers: list[AnswerOut]
    created: datetime

    @staticmethod
    def resolve_experiment(obj: PlaygroundSession) -> int:
        return obj.experiment_id


@router.post("/{team_slug}/playground", response={202: SessionOut}, summary="Ask one or two models a prompt")
def start(request: HttpRequest, team_slug: str, body: PlaygroundIn) -> Any:
    """A session queued for a worker (202); poll `GET .../playground/{id}` until its status is done.
    400 names the field it refuses, also while the member's previous session still runs."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    experiment = get_object_or_404(Experiment, pk=body.experiment, team=team)
    # The body is the Ask by its field names, less the experiment, with its models as the choices.
    ask = services.Ask(choices=body.models, **body.model_dump(exclude={"experiment", "models"}))
    try:
        session = services.start(experiment, request.user, ask)
    except services.PlaygroundRefused as refused:
        raise FieldError([(refused.field or "models", str(refused))]) from None
    return Status(202, session)


@router.get("/{team_slug}/playground/{int:pk}", response=SessionOut, summary="A playground session")
def session(request: HttpRequest, team_slug: str, pk: int) -> PlaygroundSession:
    return get_session_for_user(request, team_slug, pk)
