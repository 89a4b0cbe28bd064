"""The one access helper for teams. Objects of other apps reach their team through it.

An object outside the user's teams is a 404, never a 403: outsiders must not learn it exists.
A member whose role is too low for a write gets a 403.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.models import Membership, Role, Team


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


def get_member_for_owner(request: HttpRequest, team_slug: str, pk: int) -> Membership:
    """A membership (with its user and team) of the team named by the URL, for one of its owners to change."""
    team = get_team_for_user(request, team_slug, role=Role.OWNER)
    return get_object_or_404(Membership.objects.select_related("user", "team"), pk=pk, team=team)
