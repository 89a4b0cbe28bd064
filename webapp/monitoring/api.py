"""REST read of a run's health: every RL check with its verdict (docs/health.md#checks). Personal
API token; runs outside the caller's teams are 404."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema

from webapp.accounts.token_auth import UserTokenAuth
from webapp.experiments.access import get_run_for_user
from webapp.monitoring import health

router = Router(auth=UserTokenAuth(), tags=["health"])


class VerdictOut(Schema):
    check: str
    label: str
    explains: str = Field(description="What firing means and what to look at.")
    enabled: bool
    threshold: float
    firing: bool
    since_step: int | None = Field(description="The step the current firing began at.")
    step: int | None = Field(description="The step of the latest verdict; null: no data yet.")
    value: float | None
    episodes: int = Field(description="How many times it has started firing.")


@router.get(
    "/{team_slug}/runs/{int:run_id}/health", response=list[VerdictOut], summary="The run's health verdicts"
)
def run_health(request: HttpRequest, team_slug: str, run_id: int) -> list[dict[str, Any]]:
    run = get_run_for_user(request, team_slug, run_id)
    return [
        {
            "check": check.name,
            "label": check.label,
            "explains": check.explains,
            "enabled": rule.enabled,
            "threshold": rule.threshold,
            "firing": bool(row and row.firing),
            "since_step": row.since_step if row else None,
            "step": row.step if row else None,
            "value": row.value if row else None,
            "episodes": row.episodes if row else 0,
        }
        for check, row, rule in health.panel(run)
    ]
