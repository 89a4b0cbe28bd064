"""The one access helper for teams. Objects of other apps reach their team through it.

An object outside the user's teams is a 404, never a 403: outsiders must not learn it exists.
A member whose role is too low for a write gets a 403.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.models import ApiToken, Membership, Role, Scope, Team


def get_membership(request: HttpRequest, team_slug: str) -> Membership:
    if not request.user.is_authenticated:
        raise Http404("No such team")
    membership = (
        Membership.objects.select_related("team").filter(team__slug=team_slug, user=request.user).first()
    )
    if membership is None:
        raise Http404("No such team")
    return membership


def get_team_for_user(request: HttpRequest, team_slug: str, *, role: str = Role.VIEWER) -> Team:
    """The team named by the URL if the user belongs to it with at least ``role``."""
    membership = get_membership(request, team_slug)
    if not membership.allows(role):
        raise PermissionDenied(f"This needs the {role} role in {membership.team.name}.")
    return membership.team


def team_objects(request: HttpRequest, team_slug: str, model: type[Model]) -> QuerySet[Any]:
    """Every ``model`` row of the team named by the URL, when the user may read that team."""
    return model._default_manager.filter(team=get_team_for_user(request, team_slug))


class ReadOnlyToken(PermissionDenied):
    """A change asked of a personal token that lacks the write scope."""


def check_token_scope(token: ApiToken | None, *, write: bool) -> None:
    """The one scope check of every surface a personal token reaches: the REST API (imports and the
    CLI's calls among it), MLflow's tracking, trace and artifact calls (docs/api.md#tokens). A token
    without the write scope reads only; ReadOnlyToken (a 403) for anything else. ``token`` None: a
    signed-in session or a run's token, which scopes do not limit."""
    if write and token is not None and not token.allows(Scope.WRITE):
        raise ReadOnlyToken(f"the token {token.name!r} may only read (it lacks the write scope)")


def get_member_for_owner(request: HttpRequest, team_slug: str, pk: int) -> Membership:
    """A membership (with its user and team) of the team named by the URL, for one of its owners to change."""
    team = get_team_for_user(request, team_slug, role=Role.OWNER)
    return get_object_or_404(Membership.objects.select_related("user", "team"), pk=pk, team=team)


def is_site_admin(user: object) -> bool:
    """A site administrator: an active staff user or superuser. Settings of the whole installation
    (where team requests may go, docs/security.md#outbound) are theirs, never a team owner's: any
    signed-in user can create a team and own it."""
    active = bool(getattr(user, "is_active", False))
    return active and bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def require_site_admin(request: HttpRequest) -> None:
    """PermissionDenied (a 403 naming who can) unless the request's user is a site administrator."""
    if not is_site_admin(request.user):
        raise PermissionDenied("Only a site administrator (a staff user) can do this.")
