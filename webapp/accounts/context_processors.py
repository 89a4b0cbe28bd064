from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from webapp.accounts.models import Team


def teams(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated:
        return {}
    return {
        "my_teams": Team.objects.filter(memberships__user=request.user),
        "current_team": getattr(request, "current_team", None),
    }
