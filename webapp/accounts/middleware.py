from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from webapp.accounts.models import Membership

SESSION_KEY = "current_team_id"


class CurrentTeamMiddleware:
    """Sets ``request.current_team`` and ``request.current_membership``: the team in the URL when
    the user belongs to it, else the team chosen in the switcher, else the user's first team.
    Navigation, the switcher and which buttons a page shows (the role) follow it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        membership = _current_membership(request)
        request.current_membership = membership  # type: ignore[attr-defined]
        request.current_team = membership.team if membership else None  # type: ignore[attr-defined]
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]) -> None:
        slug = kwargs.get("team_slug")
        if not slug or not request.user.is_authenticated:
            return
        membership = (
            Membership.objects.select_related("team").filter(team__slug=slug, user=request.user).first()
        )
        if membership is not None:  # outsiders keep their own team; the view answers 404
            request.current_membership = membership  # type: ignore[attr-defined]
            request.current_team = membership.team  # type: ignore[attr-defined]
            if request.session.get(SESSION_KEY) != membership.team.pk:  # no session write per page
                request.session[SESSION_KEY] = membership.team.pk


def _current_membership(request: HttpRequest) -> Membership | None:
    if not request.user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("team").filter(user=request.user).order_by("team__name")
    chosen = request.session.get(SESSION_KEY)
    return (chosen and memberships.filter(team_id=chosen).first()) or memberships.first()
