"""REST routes of the ``studio`` SDK (docs/sdk.md#how-a-run-reaches-the-server): open a run (make or
resume it, and get its run token) and store its metadata. Personal API token with the write scope,
member role. What the run produces goes through the ingestion routes with the run's token."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router
from ninja.errors import HttpError

from trainer.contract import SDK_ID_PATTERN, SDK_META_PATH, SDK_OPEN_PATH
from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import StrictSchema
from webapp.experiments.api import RunOut
from webapp.experiments.models import Run
from webapp.experiments.sdk_runs import Meta, Resume, ResumeRefused, open_run, store_meta

router = Router(auth=UserTokenAuth(), tags=["SDK runs"])
_EXPERIMENT_NAME_MAX = 500  # Experiment.name's length


class SdkMeta(StrictSchema):
    config: dict[str, Any] = Field(default_factory=dict, description="W&B's config: stored as params.")
    summary: dict[str, Any] = Field(default_factory=dict, description="Stored as tags summary.<key>.")
    tags: list[str] = Field(default_factory=list, max_length=100, description="Added to the run's labels.")
    group: str = Field("", max_length=200)
    job_type: str = Field("", max_length=200)

    def meta(self) -> Meta:
        return Meta(self.config, self.summary, [t[:64] for t in self.tags], self.group, self.job_type)


class SdkOpen(SdkMeta):
    project: str = Field("sdk", min_length=1, max_length=_EXPERIMENT_NAME_MAX, description="The experiment.")
    name: str = Field("", max_length=200, description="Default: run-<id>.")
    id: str = Field(pattern=SDK_ID_PATTERN, description="The script's own run id; the same id resumes.")
    resume: Resume = "allow"
    worker: str = Field("", max_length=200, description="Where the script runs (host:pid).")


class SdkOpened(StrictSchema):
    run: RunOut
    token: str = Field(description="The run's token: the ingestion routes take it while the run lives.")
    claimant: str = Field(description="Send it in the claimant header with every report.")
    resumed: bool


@router.post("/{team_slug}" + SDK_OPEN_PATH, response=SdkOpened, summary="Open a run for the SDK")
def open_sdk_run(request: HttpRequest, team_slug: str, body: SdkOpen) -> Any:
    """Make the run of ``id`` (in experiment ``project``) or resume it, per ``resume`` (W&B's:
    "allow", "must": 404 without one, "never": 409 with one); an ended run is a 409. Each call gives a
    new run token and claimant id, so the latest process owns the run."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    try:
        opened = open_run(
            team,
            request.user,
            project=body.project,
            name=body.name,
            client_id=body.id,
            resume=body.resume,
            worker=body.worker,
            meta=body.meta(),
        )
    except ResumeRefused as refused:
        raise HttpError(refused.status, str(refused)) from None
    return {"run": opened.run, "token": opened.token, "claimant": opened.claimant, "resumed": opened.resumed}


@router.post(
    "/{team_slug}" + SDK_META_PATH.replace("{run_id}", "{int:run_id}"),
    response=RunOut,
    summary="Store an SDK run's metadata",
)
def sdk_run_meta(request: HttpRequest, team_slug: str, run_id: int, body: SdkMeta) -> Run:
    """The summary (and config, tags) a script sets while or after it logs; a param keeps its first value."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    run = get_object_or_404(Run, pk=run_id, team=team)
    store_meta(run, body.meta())
    return run
