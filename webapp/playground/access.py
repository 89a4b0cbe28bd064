"""The one access helper of this app: a session outside the user's teams is a 404."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.access import get_team_for_user
from webapp.playground.models import PlaygroundSession


def get_session_for_user(request: HttpRequest, team_slug: str, pk: int) -> PlaygroundSession:
    team = get_team_for_user(request, team_slug)
    return get_object_or_404(
        PlaygroundSession.objects.select_related("team", "experiment", "job", "created_by"), pk=pk, team=team
    )
