from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from webapp.accounts.models import Role, Team


def teams(request: HttpRequest) -> dict[str, Any]:
    """The user's teams for the switcher, and what their role in the current team lets pages show:
    ``can_write`` (member or owner) guards every button that changes something, ``is_owner`` the
    Members page's forms. The server checks the same roles again (webapp.accounts.access)."""
    if not request.user.is_authenticated:
        return {}
    membership = getattr(request, "current_membership", None)
    return {
        "my_teams": Team.objects.filter(memberships__user=request.user),
        "current_team": getattr(request, "current_team", None),
        "current_role": membership.role if membership else None,
        "can_write": bool(membership and membership.allows(Role.MEMBER)),
        "is_owner": bool(membership and membership.allows(Role.OWNER)),
    }
