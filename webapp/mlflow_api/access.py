"""Who is calling, and the one access helper per object type.

The client sends ``MLFLOW_TRACKING_TOKEN`` as ``Authorization: Bearer <token>``. Two kinds work:

- a personal API token (``sk_...``): the user's team — the one named in the URL
  (``/mlflow/t/<team>/``), else their first team — with their role in it;
- a run's own token (what a launched trainer holds): that one run, and a read of its experiment.

Anything outside the caller's reach answers RESOURCE_DOES_NOT_EXIST (404), as if it did not exist.
A personal token without the write scope reads only (the same check as the REST API's,
:func:`webapp.accounts.access.check_token_scope`), and a run that has ended takes no more writes
from anyone (docs/mlflow.md#access).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest

from webapp.accounts.access import ReadOnlyToken, check_token_scope
from webapp.accounts.models import ApiToken, Membership, Role, Team
from webapp.accounts.throttle import TokenLockedOut, admit_bearer
from webapp.experiments.models import Experiment, Run
from webapp.mlflow_api.errors import (
    PERMISSION_DENIED,
    REQUEST_LIMIT_EXCEEDED,
    UNAUTHENTICATED,
    MlflowError,
    invalid,
    not_found,
)

DEFAULT_EXPERIMENT_ID = "0"
DEFAULT_EXPERIMENT_NAME = "Default"


@dataclass(frozen=True)
class Caller:
    team: Team
    user: Any | None = None  # personal token
    run: Run | None = None  # a run's token: the only run it may touch
    can_write: bool = False  # the role's say; the token's scope is checked apart
    token: ApiToken | None = None  # the personal token

    @property
    def user_name(self) -> str:
        return self.user.get_username() if self.user is not None else ""

    def experiments(self) -> QuerySet[Experiment]:
        """What the caller may see: the team's experiments; a run's token, its run's experiment."""
        found = Experiment.objects.filter(team=self.team)
        return found if self.run is None else found.filter(pk=self.run.experiment_id)

    def runs(self) -> QuerySet[Run]:
        """The team's runs; a run's token, that run."""
        found = Run.objects.filter(team=self.team)
        return found if self.run is None else found.filter(pk=self.run.pk)


def authenticate(request: HttpRequest, team_slug: str | None) -> Caller:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise MlflowError(
            "A Bearer token is required: set MLFLOW_TRACKING_TOKEN to a personal API token or a run's token.",
            UNAUTHENTICATED,
        )
    token = token.strip()
    personal = token.startswith(ApiToken.PREFIX)
    found = ApiToken.find(token) if personal else Run.for_token(token)
    try:
        admit_bearer(request, token, found, run_token=not personal)
    except TokenLockedOut as locked:
        raise MlflowError(str(locked), REQUEST_LIMIT_EXCEEDED) from None
    if isinstance(found, ApiToken):
        return _member(found, team_slug)
    if found is None:
        raise MlflowError(
            "The token is not valid (revoked, never issued, or the token of a run that has ended).",
            UNAUTHENTICATED,
        )
    if team_slug and found.team.slug != team_slug:
        raise not_found(f"No team {team_slug!r}")
    return Caller(team=found.team, run=found, can_write=True)


def _member(token: ApiToken, team_slug: str | None) -> Caller:
    memberships = Membership.objects.select_related("team").filter(user=token.user)
    # Without a team in the URL: the user's first team, the same one the web UI opens with.
    membership = (
        memberships.filter(team__slug=team_slug).first()
        if team_slug
        else memberships.order_by("team__name", "team_id").first()
    )
    if membership is None:
        raise not_found(f"No team {team_slug!r}" if team_slug else "The token's user belongs to no team.")
    return Caller(
        team=membership.team, user=token.user, can_write=membership.allows(Role.MEMBER), token=token
    )


def _check_write(caller: Caller) -> None:
    if not caller.can_write:
        raise MlflowError(f"Logging needs the member role in {caller.team.name}.", PERMISSION_DENIED)
    try:
        check_token_scope(caller.token, write=True)
    except ReadOnlyToken as refused:
        raise MlflowError(str(refused), PERMISSION_DENIED) from None


def check_can_create(caller: Caller) -> None:
    """Creating experiments and runs: people only; a run's token logs to its own run."""
    if caller.run is not None:
        raise MlflowError("A run's token can only log to its own run.", PERMISSION_DENIED)
    _check_write(caller)


def parse_experiment_id(experiment_id: Any) -> int:
    try:
        return int(experiment_id)
    except (TypeError, ValueError):
        raise invalid(
            f"Invalid experiment ID '{experiment_id}'. Experiment ID must be a valid integer."
        ) from None


def get_experiment_for_caller(caller: Caller, experiment_id: Any) -> Experiment:
    """The experiment, or RESOURCE_DOES_NOT_EXIST. MLflow's default experiment "0" is the team's
    "Default" experiment, there for every team from its first MLflow call on."""
    if str(experiment_id) == DEFAULT_EXPERIMENT_ID and caller.run is None:
        return default_experiment(caller)
    pk = parse_experiment_id(experiment_id)
    found = caller.experiments().filter(pk=pk).first()
    if found is None:
        raise not_found(f"No Experiment with id={pk} exists")
    return found


def searched_experiment_pk(caller: Caller, experiment_id: Any) -> int:
    """An experiment id a search names: an id of no experiment (or of another team's) matches
    nothing, as on MLflow, so it needs no lookup."""
    if str(experiment_id) == DEFAULT_EXPERIMENT_ID and caller.run is None:
        return default_experiment(caller).pk
    return parse_experiment_id(experiment_id)


def default_experiment(caller: Caller) -> Experiment:
    """The team's "Default" experiment, made on first use: MLflow's server has it from the start,
    and a client lists, reads and logs to it without creating it (docs/mlflow.md#how-close-to-mlflow)."""
    experiment, _ = Experiment.create_external(caller.team, DEFAULT_EXPERIMENT_NAME, None)
    return experiment


def get_run_for_caller(
    caller: Caller, mlflow_run_id: str, *, write: bool = False, ended_ok: bool = False
) -> Run:
    """The run, or RESOURCE_DOES_NOT_EXIST. With ``write``: the caller may change it, and it has not
    ended (unless ``ended_ok``: the caller checks what it changes on an ended run itself)."""
    found = caller.run
    if found is None:
        found = caller.runs().select_related("experiment").filter(mlflow_run_id=mlflow_run_id).first()
        if found is not None and write:
            _check_write(caller)
    if found is None or found.mlflow_run_id != mlflow_run_id:
        raise not_found(f"Run with id={mlflow_run_id} not found")
    if write and not ended_ok and found.is_terminal:
        raise run_ended(found)
    return found


def run_ended(run: Run) -> MlflowError:
    """A write to a run that has ended: its results are final (docs/mlflow.md#access). MLflow's own
    words for a run that is not active, and its 400, so the client fails at once."""
    return invalid(
        f"The run {run.mlflow_run_id} must be in the 'active' state. It has ended ({run.status}): its "
        "results are final, and only a site administrator can reopen it (docs/mlflow.md#access)."
    )
