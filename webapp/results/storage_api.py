"""REST change of a run's retention policy (docs/rollouts.md#retention); its schemas are
webapp.retention.schemas, which the experiment create and the run detail use too."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status

from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError
from webapp.experiments.access import get_run_for_user
from webapp.ingestion.tasks import change_retention as apply_change
from webapp.retention.accounting import storage_of
from webapp.retention.policy import Retention
from webapp.retention.schemas import RetentionChange, StorageOut

router = Router(auth=UserTokenAuth(), tags=["results"])


@router.patch(
    "/{team_slug}/runs/{int:run_id}/storage", response={202: StorageOut}, summary="Change a run's retention"
)
def change_retention(request: HttpRequest, team_slug: str, run_id: int, body: RetentionChange) -> object:
    """The new policy applies to what arrives from now on, and to what is stored: what it drops is
    deleted and the space reclaimed in the background (`applying` until then). A policy only drops:
    what an earlier policy dropped does not come back."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    current = Retention.of(storage_of(run))
    chosen = Retention(
        body.retention or current.kind,
        current.keep_successes if body.keep_successes is None else body.keep_successes,
        current.sample_fraction if body.sample_fraction is None else body.sample_fraction,
    )
    problems = chosen.problems()
    if problems:
        raise FieldError(problems)
    return Status(202, apply_change(run, chosen))
