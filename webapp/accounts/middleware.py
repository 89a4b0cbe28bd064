from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from webapp.accounts.models import Team

SESSION_KEY = "current_team_id"


class CurrentTeamMiddleware:
    """Sets ``request.current_team``: the team chosen in the switcher, else the user's first team."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.current_team = _current_team(request)  # type: ignore[attr-defined]
        return self.get_response(request)


def _current_team(request: HttpRequest) -> Team | None:
    if not request.user.is_authenticated:
        return None
    teams = Team.objects.filter(memberships__user=request.user)
    chosen = request.session.get(SESSION_KEY)
    return (chosen and teams.filter(pk=chosen).first()) or teams.first()
