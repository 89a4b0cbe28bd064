"""REST for resuming a run (docs/resume.md#rest): resume it, list its attempts. Personal API token;
runs outside the caller's teams are 404, a run that cannot be resumed is 409 with the reason."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from webapp.accounts.token_auth import UserTokenAuth
from webapp.experiments.access import get_run_for_user
from webapp.experiments.api import RunOut
from webapp.experiments.lifecycle import RunAttempt
from webapp.results.resume import ResumeRefused, resume

router = Router(auth=UserTokenAuth(), tags=["runs"])


class ResumeOut(Schema):
    run: RunOut
    resumed_from_step: int = Field(description="The step of the checkpoint the run continues from.")
    attempt: int = Field(description="The number of the attempt that starts now (the first start is 1).")
    superseded_points: int = Field(
        description="Metric points of later steps the earlier attempt stored, deleted."
    )


class AttemptOut(Schema):
    number: int
    resumed_from_step: int | None = Field(description="Null for the first attempt.")
    started_at: datetime | None
    ended_at: datetime | None = Field(description="Null while it runs.")
    end_status: str = Field(description="failed, cancelled, stalled or succeeded; empty while it runs.")
    end_message: str = Field(description="Why it ended.")


@router.post(
    "/{team_slug}/runs/{int:run_id}/resume",
    response={200: ResumeOut, 409: dict},
    summary="Resume a failed, cancelled or stalled run from its newest checkpoint",
)
def resume_run(request: HttpRequest, team_slug: str, run_id: int) -> dict[str, Any]:
    """The same run continues from its newest complete checkpoint that holds the optimiser state, as a
    new attempt; what it stored after that step is superseded. 409 with the reason when it cannot: still
    active, succeeded, no checkpoint, weights-only checkpoints, an evaluation or an external run."""
    found = get_run_for_user(request, team_slug, run_id, write=True)
    try:
        resumed = resume(found, request.user)
    except ResumeRefused as exc:
        raise HttpError(409, str(exc)) from None
    return {
        "run": found,
        "resumed_from_step": resumed.step,
        "attempt": resumed.attempt,
        "superseded_points": resumed.superseded.points,
    }


@router.get(
    "/{team_slug}/runs/{int:run_id}/attempts", response=list[AttemptOut], summary="The attempts of a run"
)
def attempts(request: HttpRequest, team_slug: str, run_id: int) -> list[RunAttempt]:
    """Each start of the run, oldest first; empty for a run never resumed."""
    found = get_run_for_user(request, team_slug, run_id)
    return list(found.attempts.all())
