"""The access helpers for tools: a tool or trial outside the user's teams is a 404; an outbound
target is the site administrators' alone (a 403 for anyone else)."""

from __future__ import annotations

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from trainer.tools import BaseTool
from webapp.accounts.access import get_team_for_user, require_site_admin
from webapp.accounts.models import Role, Team
from webapp.tools.models import TeamReward, TeamTool, ToolTrial, builtin_tools
from webapp.tools.outbound import OutboundTarget


def get_tool_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> TeamTool:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(TeamTool.objects.select_related("team"), pk=pk, team=team)


def get_builtin_for_user(
    request: HttpRequest, team_slug: str, name: str, *, write: bool = False
) -> tuple[Team, type[BaseTool]]:
    """Built-in tools belong to everyone, but are reached (and tried) through one of the user's teams."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    for tool in builtin_tools():
        if tool.name == name:
            return team, tool
    raise Http404("No such built-in tool")


def get_trial_for_user(request: HttpRequest, team_slug: str, pk: int) -> ToolTrial:
    team = get_team_for_user(request, team_slug)
    return get_object_or_404(
        ToolTrial.objects.select_related("team", "tool", "team_reward"), pk=pk, team=team
    )


def get_reward_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> TeamReward:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(TeamReward.objects.select_related("team"), pk=pk, team=team)


def get_target_for_admin(request: HttpRequest, pk: int) -> OutboundTarget:
    """An outbound target, for a site administrator to change (403 for anyone else)."""
    require_site_admin(request)
    return get_object_or_404(OutboundTarget, pk=pk)
