"""REST (personal API token): the team's tools and rewards — list, read, create, change, try,
delete — and the trials a try starts. The bodies are checked by the same forms as the pages
(webapp/tools/forms.py); secrets are accepted, stored encrypted and never sent back."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, Page, PageParams, StrictSchema, form_error, paginate
from webapp.tools.access import get_reward_for_user, get_tool_for_user, get_trial_for_user
from webapp.tools.forms import RewardForm, RewardTryForm, ToolForm, TryForm
from webapp.tools.models import MAX_TIMEOUT_S, TeamReward, TeamTool, ToolTrial

router = Router(auth=UserTokenAuth(), tags=["tools"])
rewards_router = Router(auth=UserTokenAuth(), tags=["rewards"])


class ToolOut(Schema):
    id: int
    name: str
    description: str
    parameters: dict[str, Any]
    kind: str
    url: str
    method: str
    timeout_s: float
    entry_point: str
    status: str
    status_message: str
    created: datetime


class ToolIn(StrictSchema):
    name: str = Field(min_length=1, max_length=64, description="The function name the model calls.")
    description: str = Field("", max_length=10_000)
    parameters: dict[str, Any] = Field(description="JSON Schema (type object) of the arguments.")
    kind: Literal["http", "python"] = "http"
    url: str = Field("", max_length=500)
    method: Literal["POST", "GET"] = "POST"
    timeout_s: float = Field(10.0, ge=0.1, le=MAX_TIMEOUT_S)
    secret_header: str = Field("X-Tool-Secret", max_length=100)
    secret: str = Field("", max_length=1000, description="Sent with every call; never shown again.")
    entry_point: str = Field("", max_length=200, description="python kind (staff): package.module:Class")


class ToolChange(StrictSchema):
    """Only the fields to change; the others keep their values (a blank secret keeps the secret)."""

    name: str | None = Field(None, min_length=1, max_length=64)
    description: str | None = Field(None, max_length=10_000)
    parameters: dict[str, Any] | None = None
    url: str | None = Field(None, max_length=500)
    method: Literal["POST", "GET"] | None = None
    timeout_s: float | None = Field(None, ge=0.1, le=MAX_TIMEOUT_S)
    secret_header: str | None = Field(None, max_length=100)
    secret: str | None = Field(None, max_length=1000)
    entry_point: str | None = Field(None, max_length=200)


class TryIn(StrictSchema):
    arguments: dict[str, Any] = Field(description="The call's arguments, checked against the tool's schema.")


class TrialOut(Schema):
    id: int
    tool: str
    status: str = Field(description="pending until a worker has made the call, then done.")
    arguments: dict[str, Any]
    result: str = Field(description="What the model would see (a reward's try: its score as JSON).")
    error: str
    reward: float | None
    latency_s: float | None
    created: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_tool(obj: ToolTrial) -> str:
        return obj.tool_name


_TOOL_DEFINITION = (
    "name",
    "description",
    "parameters",
    "kind",
    "url",
    "method",
    "timeout_s",
    "secret_header",
    "entry_point",
)


def _team_page(
    model: type[TeamTool] | type[TeamReward], request: HttpRequest, team_slug: str, paging: PageParams
) -> dict[str, Any]:
    """One page of the team's tools or rewards, by name."""
    team = get_team_for_user(request, team_slug)
    return paginate(model.objects.filter(team=team).order_by("name", "id"), paging)


def _registered(
    model: type[TeamTool] | type[TeamReward], form: ToolForm | RewardForm, request: HttpRequest
) -> Any:
    """201 with what the form registers in its team; its errors as a 400."""
    if not form.is_valid():
        raise form_error(form)
    return Status(201, model.register(form.team, request.user, **form.registration()))


def _with_changes(found: TeamTool | TeamReward, names: tuple[str, ...], changes: Schema) -> dict[str, Any]:
    """The definition ``found`` has, under the body's changes (the fields it gives)."""
    return {**{name: getattr(found, name) for name in names}, **changes.dict(exclude_none=True)}


def _changed(found: TeamTool | TeamReward, form: ToolForm | RewardForm) -> None:
    """Save the form's definition on ``found``; its errors as a 400."""
    if not form.is_valid():
        raise form_error(form)
    found.change(**form.registration())


@router.get("/{team_slug}/tools", response=Page[ToolOut], summary="The team's tools")
def tools(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    return _team_page(TeamTool, request, team_slug, paging)


@router.get("/{team_slug}/tools/{int:pk}", response=ToolOut, summary="One tool")
def tool(request: HttpRequest, team_slug: str, pk: int) -> TeamTool:
    return get_tool_for_user(request, team_slug, pk)


@router.post("/{team_slug}/tools", response={201: ToolOut}, summary="Register a tool")
def create_tool(request: HttpRequest, team_slug: str, body: ToolIn) -> Any:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = ToolForm(_form_data(body.dict()), team=team, is_staff=request.user.is_staff)
    return _registered(TeamTool, form, request)


@router.patch("/{team_slug}/tools/{int:pk}", response=ToolOut, summary="Change a tool")
def change_tool(request: HttpRequest, team_slug: str, pk: int, body: ToolChange) -> TeamTool:
    found = get_tool_for_user(request, team_slug, pk, write=True)
    data = _form_data(_with_changes(found, _TOOL_DEFINITION, body))
    _changed(found, ToolForm(data, team=found.team, is_staff=request.user.is_staff, editing=found))
    return found


@router.delete("/{team_slug}/tools/{int:pk}", response={204: None}, summary="Delete a tool")
def delete_tool(request: HttpRequest, team_slug: str, pk: int) -> Any:
    get_tool_for_user(request, team_slug, pk, write=True).delete()
    return Status(204, None)


@router.post("/{team_slug}/tools/{int:pk}/try", response={202: TrialOut, 409: dict}, summary="Try a tool")
def try_tool(request: HttpRequest, team_slug: str, pk: int, body: TryIn) -> Any:
    """A worker makes the call as a run would; poll the trial until it is done."""
    found = get_tool_for_user(request, team_slug, pk, write=True)
    form = TryForm({"arguments": _stored_json(body.arguments, "arguments")}, parameters=found.parameters)
    if not form.is_valid():
        raise form_error(form)
    if not found.is_ready:
        raise HttpError(409, f"{found.name} is not ready ({found.get_status_display()})")
    return Status(202, ToolTrial.start(found.team, request.user, form.cleaned_data["arguments"], tool=found))


@router.get("/{team_slug}/trials/{int:pk}", response=TrialOut, summary="One try of a tool or a reward")
def trial(request: HttpRequest, team_slug: str, pk: int) -> ToolTrial:
    return get_trial_for_user(request, team_slug, pk)


def _stored_json(value: Any, field: str) -> str:
    """The value as JSON text Postgres can store: NaN and the infinities are refused (400)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        raise FieldError([(field, "NaN and infinities are not JSON numbers")]) from None


def _form_data(values: dict[str, Any]) -> dict[str, Any]:
    """A JSON body as the form's data: JSON fields as text, like the page's textarea sends them."""
    return {
        key: json.dumps(value) if isinstance(value, dict | list) else value for key, value in values.items()
    }


# -- rewards --------------------------------------------------------------------------------------


class RewardOut(Schema):
    id: int
    name: str
    description: str
    data_source: str
    kind: str
    rule: str
    tolerance: float
    pattern: str
    format_pattern: str
    format_bonus: float
    url: str
    timeout_s: float
    retries: int
    created: datetime


class RewardIn(StrictSchema):
    name: str = Field(min_length=1, max_length=64)
    description: str = Field("", max_length=10_000)
    data_source: str = Field("", max_length=200, description="Rows with this data_source are scored by it.")
    kind: Literal["rule", "remote"] = "rule"
    rule: Literal["exact", "numeric", "contains", "regex", "f1"] = "exact"
    tolerance: float = Field(0.0, ge=0.0, le=1e12)
    pattern: str = Field("", max_length=500)
    format_pattern: str = Field("", max_length=500)
    format_bonus: float = Field(0.0, ge=-1e6, le=1e6)
    url: str = Field("", max_length=500)
    timeout_s: float = Field(10.0, ge=0.1, le=MAX_TIMEOUT_S)
    retries: int = Field(1, ge=0, le=5)
    secret_header: str = Field("X-Reward-Secret", max_length=100)
    secret: str = Field("", max_length=1000)


class RewardChange(StrictSchema):
    """Only the fields to change; the others keep their values (a blank secret keeps the secret)."""

    name: str | None = Field(None, min_length=1, max_length=64)
    description: str | None = Field(None, max_length=10_000)
    data_source: str | None = Field(None, max_length=200)
    rule: Literal["exact", "numeric", "contains", "regex", "f1"] | None = None
    tolerance: float | None = Field(None, ge=0.0, le=1e12)
    pattern: str | None = Field(None, max_length=500)
    format_pattern: str | None = Field(None, max_length=500)
    format_bonus: float | None = Field(None, ge=-1e6, le=1e6)
    url: str | None = Field(None, max_length=500)
    timeout_s: float | None = Field(None, ge=0.1, le=MAX_TIMEOUT_S)
    retries: int | None = Field(None, ge=0, le=5)
    secret_header: str | None = Field(None, max_length=100)
    secret: str | None = Field(None, max_length=1000)


class RewardTryIn(StrictSchema):
    response: str = Field(min_length=1, max_length=100_000, description="A model response to score.")
    ground_truth: Any = Field(description="The row's reward_model.ground_truth.")
    extra_info: dict[str, Any] = Field(default_factory=dict)


_REWARD_DEFINITION = (
    "name",
    "description",
    "data_source",
    "kind",
    "rule",
    "tolerance",
    "pattern",
    "format_pattern",
    "format_bonus",
    "url",
    "timeout_s",
    "retries",
    "secret_header",
)


@rewards_router.get("/{team_slug}/rewards", response=Page[RewardOut], summary="The team's rewards")
def rewards(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    return _team_page(TeamReward, request, team_slug, paging)


@rewards_router.get("/{team_slug}/rewards/{int:pk}", response=RewardOut, summary="One reward")
def reward(request: HttpRequest, team_slug: str, pk: int) -> TeamReward:
    return get_reward_for_user(request, team_slug, pk)


@rewards_router.post("/{team_slug}/rewards", response={201: RewardOut}, summary="Register a reward")
def create_reward(request: HttpRequest, team_slug: str, body: RewardIn) -> Any:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    return _registered(TeamReward, RewardForm(body.dict(), team=team), request)


@rewards_router.patch("/{team_slug}/rewards/{int:pk}", response=RewardOut, summary="Change a reward")
def change_reward(request: HttpRequest, team_slug: str, pk: int, body: RewardChange) -> TeamReward:
    found = get_reward_for_user(request, team_slug, pk, write=True)
    _changed(
        found, RewardForm(_with_changes(found, _REWARD_DEFINITION, body), team=found.team, editing=found)
    )
    return found


@rewards_router.delete("/{team_slug}/rewards/{int:pk}", response={204: None}, summary="Delete a reward")
def delete_reward(request: HttpRequest, team_slug: str, pk: int) -> Any:
    get_reward_for_user(request, team_slug, pk, write=True).delete()
    return Status(204, None)


@rewards_router.post(
    "/{team_slug}/rewards/{int:pk}/try", response={202: TrialOut}, summary="Score a response with a reward"
)
def try_reward(request: HttpRequest, team_slug: str, pk: int, body: RewardTryIn) -> Any:
    """A worker scores it as a run would; poll the trial (GET …/trials/{id}) for the score."""
    found = get_reward_for_user(request, team_slug, pk, write=True)
    data = {
        "response": body.response,
        "ground_truth": _stored_json(body.ground_truth, "ground_truth"),
        "extra_info": _stored_json(body.extra_info, "extra_info"),
    }
    form = RewardTryForm(data)
    if not form.is_valid():
        raise form_error(form)
    return Status(202, ToolTrial.start(found.team, request.user, form.arguments(), team_reward=found))
