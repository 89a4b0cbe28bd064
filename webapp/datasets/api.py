"""REST access to the team's datasets (personal API token): list, upload, recipe imports, archive,
delete. The trainer's download of its run's dataset is webapp.experiments.trainer_api."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import FileResponse, HttpRequest
from django.shortcuts import get_object_or_404
from django.utils.text import slugify
from ninja import Field, FilterSchema, Query, Router, Schema, Status
from ninja.errors import HttpError

from trainer.contract import INT4_MAX
from webapp.accounts.access import get_team_for_user, team_objects
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import (
    Page,
    PageParams,
    StrictSchema,
    file_field,
    form_error,
    multipart_body,
    newest_first,
    text_field,
)
from webapp.datasets.access import get_dataset_for_user
from webapp.datasets.files import UPLOAD_FIELD, StreamingUploadHandler, parquet_download
from webapp.datasets.forms import RecipeForm, UploadForm
from webapp.datasets.models import Dataset, DatasetInUse, RecipeImport

team_router = Router(auth=UserTokenAuth(), tags=["datasets"])


class DatasetOut(Schema):
    id: int
    name: str
    sha256: str
    size_bytes: int
    status: str
    problems: list[Any]
    stats: dict[str, Any]
    source: str
    created: datetime
    validated_at: datetime | None


class DatasetFilters(FilterSchema):
    sha256: str = Field(
        "", max_length=64, description="Only the dataset of this content (a client's resume check)."
    )

    def filter_sha256(self, value: str) -> Q:
        # Stored lower-case; a client's hex digest in capitals names the same content.
        return Q(sha256=value.lower()) if value else Q()


@team_router.get("/{team_slug}/datasets", response=Page[DatasetOut], summary="The team's datasets")
def datasets(
    request: HttpRequest, team_slug: str, filters: Query[DatasetFilters], paging: Query[PageParams]
) -> dict[str, Any]:
    return newest_first(filters.filter(team_objects(request, team_slug, Dataset)), paging)


@team_router.get("/{team_slug}/datasets/{int:pk}", response=DatasetOut, summary="One dataset")
def dataset(request: HttpRequest, team_slug: str, pk: int) -> Dataset:
    return get_dataset_for_user(request, team_slug, pk)


_UPLOAD_BODY = multipart_body(
    [UPLOAD_FIELD],
    {UPLOAD_FIELD: file_field("The parquet file."), "name": text_field("Blank: the file's name.")},
)


@team_router.post(
    "/{team_slug}/datasets",
    response={201: DatasetOut, 200: DatasetOut},
    summary="Upload a parquet file (streamed to disk) and validate it",
    openapi_extra=_UPLOAD_BODY,
)
def upload(request: HttpRequest, team_slug: str) -> Any:
    """Multipart with the field `file`: streamed to disk in chunks (never held in memory), hashed,
    validated by the same checks as the datasets page, and answered with the verdict (`status`,
    `problems`). The same content again answers 200 with the existing dataset, so an interrupted
    upload is simply sent again (docs/api.md#uploads). 413 above STUDIO_UPLOAD_MAX_BYTES."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    handler = StreamingUploadHandler(request, max_bytes=settings.UPLOAD_MAX_BYTES)
    request.upload_handlers = [handler]
    try:
        form = UploadForm(request.POST, request.FILES, rejection=handler.rejection)
        if handler.rejection:
            raise HttpError(413, handler.rejection)
        if not form.is_valid() or form.upload is None:
            raise form_error(form)
        found, created = form.save_dataset(team, request.user, via_api=True, validate_later=False)
    finally:
        handler.remove_leftover()
    found.validate()
    found.refresh_from_db()
    return Status(201 if created else 200, found)


class RecipePrepare(StrictSchema):
    task: str = Field(min_length=1, max_length=100, description="A built-in recipe (GET /tasks in the UI).")
    size: int | None = Field(None, ge=2, le=100_000)
    val_size: int | None = Field(None, ge=1, le=100_000)
    seed: int = Field(0, ge=0, le=INT4_MAX)
    from_package: bool = False
    level: str = Field(
        "",
        max_length=50,
        description="A level of the recipe's generator (arithmetic: small or multiply); empty: its default.",
    )


class RecipeImportOut(Schema):
    id: int
    task: str
    status: str
    message: str
    datasets: list[int]
    created: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_datasets(obj: RecipeImport) -> list[int]:
        return list(obj.datasets.values_list("pk", flat=True))


@team_router.post(
    "/{team_slug}/datasets/from-recipe",
    response={202: RecipeImportOut},
    summary="Prepare a recipe's datasets",
)
def from_recipe(request: HttpRequest, team_slug: str, body: RecipePrepare) -> Any:
    """A worker runs the recipe's prepare step; poll the import until `done` for its datasets."""
    from webapp.datasets.views import recipe_choices

    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = RecipeForm(body.dict(), tasks=recipe_choices(), is_staff=False)
    if not form.is_valid():
        raise form_error(form)
    started = RecipeImport.start(team, form.cleaned_data["task"], "", request.user, form.options())
    return Status(202, started)


@team_router.get(
    "/{team_slug}/datasets/imports/{int:pk}", response=RecipeImportOut, summary="One recipe preparation"
)
def recipe_import(request: HttpRequest, team_slug: str, pk: int) -> RecipeImport:
    team = get_team_for_user(request, team_slug)
    return get_object_or_404(RecipeImport, pk=pk, team=team)


class ArchiveChange(StrictSchema):
    archived: bool = True


@team_router.post(
    "/{team_slug}/datasets/{int:pk}/archive", response=DatasetOut, summary="Archive (or restore) a dataset"
)
def archive(request: HttpRequest, team_slug: str, pk: int, body: ArchiveChange) -> Dataset:
    found = get_dataset_for_user(request, team_slug, pk, write=True)
    found.set_archived(body.archived)
    return found


@team_router.delete(
    "/{team_slug}/datasets/{int:pk}", response={204: None, 409: dict}, summary="Delete an unused dataset"
)
def delete(request: HttpRequest, team_slug: str, pk: int) -> Any:
    """409 while an experiment or run names it: archive it instead."""
    found = get_dataset_for_user(request, team_slug, pk, write=True)
    try:
        found.delete_unused()
    except DatasetInUse as error:
        raise HttpError(409, str(error)) from None
    return Status(204, None)


@team_router.get(
    "/{team_slug}/datasets/{int:pk}/file",
    response={200: None, 409: dict},
    summary="Download the parquet file",
)
def download(request: HttpRequest, team_slug: str, pk: int) -> FileResponse:
    found = get_dataset_for_user(request, team_slug, pk)
    if not found.is_usable:
        raise HttpError(409, f"{found.name} is {found.status}: only valid datasets can be downloaded")
    return parquet_download(found.path, f"{slugify(found.name) or 'dataset'}.parquet")
