from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from webapp.accounts.models import Team

SESSION_KEY = "current_team_id"


class CurrentTeamMiddleware:
    """Sets ``request.current_team``: the team in the URL when the user belongs to it, else the
    team chosen in the switcher, else the user's first team. Navigation and the switcher follow it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.current_team = _current_team(request)  # type: ignore[attr-defined]
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]) -> None:
        slug = kwargs.get("team_slug")
        if not slug or not request.user.is_authenticated:
            return
        team = Team.objects.filter(slug=slug, memberships__user=request.user).first()
        if team is not None:  # outsiders keep their own team; the view answers 404
            request.current_team = team  # type: ignore[attr-defined]
            request.session[SESSION_KEY] = team.pk


def _current_team(request: HttpRequest) -> Team | None:
    if not request.user.is_authenticated:
        return None
    teams = Team.objects.filter(memberships__user=request.user)
    chosen = request.session.get(SESSION_KEY)
    return (chosen and teams.filter(pk=chosen).first()) or teams.first()
