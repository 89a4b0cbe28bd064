"""REST (personal API token): the team's registered tools, read-only. Secrets never leave the server."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema

from webapp.accounts.access import get_team_for_user
from webapp.api import Page, PageParams, UserTokenAuth, paginate
from webapp.tools.access import get_tool_for_user
from webapp.tools.models import TeamTool

router = Router(auth=UserTokenAuth(), tags=["tools"])


class ToolOut(Schema):
    id: int
    name: str
    description: str
    parameters: dict[str, Any]
    kind: str
    url: str
    method: str
    timeout_s: float
    entry_point: str
    status: str
    status_message: str
    created: datetime


@router.get("/{team_slug}/tools", response=Page[ToolOut], summary="The team's tools")
def tools(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    team = get_team_for_user(request, team_slug)
    return paginate(TeamTool.objects.filter(team=team).order_by("name", "id"), paging)


@router.get("/{team_slug}/tools/{int:pk}", response=ToolOut, summary="One tool")
def tool(request: HttpRequest, team_slug: str, pk: int) -> TeamTool:
    return get_tool_for_user(request, team_slug, pk)
