"""Checkpoint exports over the REST API (docs/checkpoints.md#export): start one, follow its job,
download the folder as a zip stream. Personal API token."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router
from ninja.errors import HttpError
from ninja.responses import Status

from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import StrictSchema
from webapp.experiments.access import get_job_for_user, get_run_for_user
from webapp.experiments.jobs import JobRefused, TooManyJobs
from webapp.results import model_export
from webapp.results.api import JobOut
from webapp.results.checkpoints import folder_response

router = Router(auth=UserTokenAuth(), tags=["checkpoints"])


class ExportIn(StrictSchema):
    merge_lora: bool = Field(default=False, description="Merge a LoRA checkpoint into its base model.")


@router.post(
    "/{team_slug}/runs/{int:run_id}/checkpoints/{int:step}/export",
    response={202: JobOut, 409: dict, 429: dict},
    summary="Export a checkpoint as a Hugging Face folder: a job to poll",
)
def start_export(request: HttpRequest, team_slug: str, run_id: int, step: int, body: ExportIn) -> Any:
    """The folder is written under STUDIO_EXPORT_DIR by a worker; poll `GET .../exports/{id}` until
    it is done (its `result.path`, `files`, `bytes`), then download it. 409 when the checkpoint's files
    are gone, 429 past the member's two exports at once."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    try:
        job = model_export.start(run, step, request.user, merge_lora=body.merge_lora)
    except JobRefused as refused:
        raise HttpError(409, str(refused)) from None
    except TooManyJobs as refused:
        raise HttpError(429, str(refused)) from None
    return Status(202, job)


@router.get("/{team_slug}/exports/{int:pk}", response=JobOut, summary="One export: its progress and folder")
def export_job(request: HttpRequest, team_slug: str, pk: int) -> Any:
    return get_job_for_user(request, team_slug, pk, model_export.EXPORT_JOB)


@router.get(
    "/{team_slug}/exports/{int:pk}/download",
    response={200: None, 409: dict},
    summary="A finished export as a zip",
)
def export_download(request: HttpRequest, team_slug: str, pk: int) -> StreamingHttpResponse:
    """The export's Hugging Face folder as a zip stream; 409 until it is done, or once it is gone."""
    job = get_job_for_user(request, team_slug, pk, model_export.EXPORT_JOB)
    folder = model_export.export_folder(job)
    if folder is None:
        raise HttpError(
            409, f"export {job.pk} has no folder to download (it is {job.status}, or was removed)"
        )
    return folder_response(folder, folder.name)
