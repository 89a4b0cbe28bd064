"""The trainer's dataset download (trainer.contract.DATASET_PATH) with the run's bearer token.

The run's frozen config names its data as ``dataset:<id>`` in ``data.train_path`` / ``data.val_path``;
the file served is that dataset of the run's own team, and only while it is valid.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import FileResponse, Http404, HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import HttpError

from trainer.contract import DATASET_PATH
from webapp.accounts.access import get_team_for_user
from webapp.api import PageParams, RunTokenAuth, UserTokenAuth, get_run_for_token, paginate, route
from webapp.datasets.access import get_dataset_for_user
from webapp.datasets.models import Dataset

router = Router(auth=RunTokenAuth(), tags=["datasets (trainer)"])

SPLITS = ("train", "val")


@router.get(
    route(DATASET_PATH),
    summary="The run's train or val parquet file",
    response={200: None, 404: dict, 409: dict},
)
def run_dataset(request: HttpRequest, run_id: int, split: str) -> FileResponse:
    run = get_run_for_token(request, run_id)
    reference = (run.config.get("data") or {}).get(f"{split}_path") if split in SPLITS else None
    if not reference:
        raise Http404(f"run {run_id} has no {split!r} split")  # the trainer reads 404 as "no such split"
    dataset = Dataset.resolve(run.team, reference)
    if dataset is None:
        raise HttpError(409, f"{reference!r} is not a valid dataset of this run's team")
    return FileResponse(
        dataset.path.open("rb"), as_attachment=True, filename=f"{split}.parquet",
        content_type="application/vnd.apache.parquet",
    )  # fmt: skip


# -- REST (personal API token): the team's datasets, read-only ------------------------------------

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


class DatasetPage(Schema):
    items: list[DatasetOut]
    count: int
    page: int
    page_size: int


@team_router.get("/{team_slug}/datasets", response=DatasetPage, summary="The team's datasets")
def datasets(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    team = get_team_for_user(request, team_slug)
    return paginate(Dataset.objects.filter(team=team).order_by("-created", "-id"), paging)


@team_router.get("/{team_slug}/datasets/{int:pk}", response=DatasetOut, summary="One dataset")
def dataset(request: HttpRequest, team_slug: str, pk: int) -> Dataset:
    return get_dataset_for_user(request, team_slug, pk)
