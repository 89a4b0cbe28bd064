"""REST access to a run's checkpoints: the list, and one as a zip stream (webapp.results.checkpoints).
Personal API token; whoever may read the run may download them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from webapp.accounts.token_auth import UserTokenAuth
from webapp.experiments.access import get_run_for_user
from webapp.experiments.run_files import checkpoint_folder
from webapp.ingestion.models import Checkpoint
from webapp.results.checkpoints import checkpoint_of, download_response

router = Router(auth=UserTokenAuth(), tags=["checkpoints"])


class CheckpointOut(Schema):
    step: int
    size_bytes: int | None = Field(description="Bytes of every file in it; none from an older trainer.")
    deleted: bool = Field(description="The trainer deleted its files (trainer.keep_checkpoints).")
    received: datetime
    metrics: dict[str, float | None]
    download: str | None = Field(description="The zip download's API path; none when its files are gone.")

    @staticmethod
    def resolve_download(obj: Checkpoint, context: dict[str, Any]) -> str | None:
        """Beside the list's own path (the request's), as the download route below."""
        return None if obj.deleted else f"{context['request'].path.rstrip('/')}/{obj.step}/download"


@router.get(
    "/{team_slug}/runs/{int:run_id}/checkpoints", response=list[CheckpointOut], summary="A run's checkpoints"
)
def checkpoints(request: HttpRequest, team_slug: str, run_id: int) -> QuerySet[Checkpoint]:
    return get_run_for_user(request, team_slug, run_id).checkpoints.order_by("step")


@router.get(
    "/{team_slug}/runs/{int:run_id}/checkpoints/{int:step}/download",
    response={200: None, 409: dict},
    summary="One checkpoint as a zip",
)
def checkpoint_download(
    request: HttpRequest, team_slug: str, run_id: int, step: int
) -> StreamingHttpResponse:
    """The checkpoint's folder as a zip stream; 409 when its files are gone."""
    run = get_run_for_user(request, team_slug, run_id)
    checkpoint = checkpoint_of(run, step)
    folder = checkpoint_folder(checkpoint)
    if folder is None:
        raise HttpError(409, f"the checkpoint of step {step} has no files left (deleted, or moved)")
    return download_response(run, checkpoint, folder)
