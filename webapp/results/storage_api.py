"""REST access to a run's retention policy and storage (docs/rollouts.md#retention): the schemas the
experiment create and the run detail use too, and the change of a run's policy."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from webapp.api import FieldError, StrictSchema, UserTokenAuth
from webapp.experiments.access import get_run_for_user
from webapp.ingestion import storage
from webapp.retention.models import RunStorage
from webapp.retention.policy import MAX_KEEP_SUCCESSES, Retention

router = Router(auth=UserTokenAuth(), tags=["results"])

RetentionName = Literal["all", "failures", "sample"]


class RetentionIn(StrictSchema):
    """A retention policy: `all` keeps everything; `failures` every failure plus `keep_successes`
    successes per training step; `sample` a fraction, drawn by a hash of the trajectory's id."""

    retention: RetentionName = "all"
    keep_successes: int = Field(4, ge=0, le=MAX_KEEP_SUCCESSES, description="k of `failures`.")
    sample_fraction: float = Field(0.1, gt=0, le=1, allow_inf_nan=False, description="Of `sample`.")

    def policy(self) -> Retention:
        return Retention(self.retention, self.keep_successes, self.sample_fraction)


class RetentionChange(StrictSchema):
    """Only the fields to change; the others keep the run's current values."""

    retention: RetentionName | None = None
    keep_successes: int | None = Field(None, ge=0, le=MAX_KEEP_SUCCESSES)
    sample_fraction: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)


class StorageOut(Schema):
    retention: str
    keep_successes: int
    sample_fraction: float
    policy: str = Field(description="The policy in words.")
    applying: bool = Field(description="A change is being applied to the stored data.")
    received: int = Field(description="Trajectories that arrived (replays not counted).")
    kept: int = Field(description="Trajectories stored now.")
    trajectory_bytes: int
    step_bytes: int
    token_signal_bytes: int
    tool_call_bytes: int
    text_bytes: int = Field(description="The texts this run was first to store (texts are stored once).")
    total_bytes: int

    @staticmethod
    def resolve_policy(obj: RunStorage) -> str:
        return Retention.of(obj).describe()


@router.patch(
    "/{team_slug}/runs/{int:run_id}/storage", response={202: StorageOut}, summary="Change a run's retention"
)
def change_retention(request: HttpRequest, team_slug: str, run_id: int, body: RetentionChange) -> object:
    """The new policy applies to what arrives from now on, and to what is stored: what it drops is
    deleted and the space reclaimed in the background (`applying` until then). A policy only drops:
    what an earlier policy dropped does not come back."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    current = Retention.of(storage.storage_of(run))
    chosen = Retention(
        body.retention or current.kind,
        current.keep_successes if body.keep_successes is None else body.keep_successes,
        current.sample_fraction if body.sample_fraction is None else body.sample_fraction,
    )
    problems = chosen.problems()
    if problems:
        raise FieldError(problems)
    return Status(202, storage.change_retention(run, chosen))
