"""REST reads of a run's results: metrics (latest values, downsampled curves, raw points) and tool
analytics, plus the team's comparison table, imports and demonstrations jobs (its trajectories:
webapp.rollouts.api).
Personal API token; runs outside the caller's teams are 404."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, StrictSchema, file_field, multipart_body, text_field
from webapp.datasets.access import get_dataset_for_user
from webapp.datasets.demonstrations import DemonstrationsRefused
from webapp.experiments import demonstrations
from webapp.experiments.access import get_job_for_user, get_run_for_user
from webapp.experiments.api import RunOut
from webapp.experiments.jobs import TooManyJobs
from webapp.ingestion import metrics_store
from webapp.results import analytics, import_jobs

router = Router(auth=UserTokenAuth(), tags=["results"])

MAX_RAW_POINTS = 10_000
MAX_CURVE_KEYS = 50


class SeriesOut(Schema):
    run: int
    key: str
    step: list[int]
    value: list[float]
    ts: list[float]
    source: str = Field(description="raw, or the summary level the points were read from")


class CurveKeys(Schema):
    keys: list[str] = Field(
        [], max_length=MAX_CURVE_KEYS, description="Metric keys, repeated or comma-separated."
    )
    key: list[str] = Field([], max_length=MAX_CURVE_KEYS, description="The former name of `keys`.")


class CurveOut(Schema):
    series: list[SeriesOut]


class LatestOut(Schema):
    key: str
    step: int
    value: float


class PointsOut(Schema):
    key: str
    step: list[int]
    value: list[float]
    ts: list[float]
    next_after: int | None = Field(description="pass as `after` for the next page; null on the last")


@router.get(
    "/{team_slug}/runs/{int:run_id}/metrics", response=list[LatestOut], summary="Latest value of every key"
)
def latest(request: HttpRequest, team_slug: str, run_id: int) -> list[dict[str, Any]]:
    run = get_run_for_user(request, team_slug, run_id)
    return [{"key": k, "step": s, "value": v} for k, (s, v) in metrics_store.latest_values(run.pk).items()]


@router.get("/{team_slug}/runs/{int:run_id}/metrics/curve", response=CurveOut, summary="Downsampled curves")
def curve(
    request: HttpRequest,
    team_slug: str,
    run_id: int,
    chosen_keys: Query[CurveKeys],
    lo: int | None = None,
    hi: int | None = None,
) -> dict[str, Any]:
    """At most ~1,000 points per key: each bucket's minimum and maximum, so spikes survive."""
    run = get_run_for_user(request, team_slug, run_id)
    named = (*chosen_keys.keys, *chosen_keys.key)
    chosen = list(dict.fromkeys(k for value in named for k in value.split(",") if k))
    if not chosen:
        raise FieldError([("keys", "name at least one metric key, e.g. ?keys=reward/mean")])
    if len(chosen) > MAX_CURVE_KEYS:
        raise FieldError([("keys", f"at most {MAX_CURVE_KEYS} keys")])
    return {"series": [metrics_store.downsample(run.pk, k, lo, hi).as_dict() for k in chosen]}


@router.get(
    "/{team_slug}/runs/{int:run_id}/metrics/points", response=PointsOut, summary="Raw points, paged by step"
)
def points(
    request: HttpRequest, team_slug: str, run_id: int, key: str, after: int = -1, limit: int = 1000
) -> dict[str, Any]:
    run = get_run_for_user(request, team_slug, run_id)
    limit = max(1, min(limit, MAX_RAW_POINTS))
    rows = metrics_store.raw_points(run.pk, key, after + 1, 2**31 - 1, limit)
    return {
        "key": key,
        "step": [r[0] for r in rows],
        "value": [r[1] for r in rows],
        "ts": [r[2] for r in rows],
        "next_after": rows[-1][0] if len(rows) == limit else None,
    }


@router.get("/{team_slug}/runs/{int:run_id}/tools", summary="Tool use per tool across training steps")
def tools(request: HttpRequest, team_slug: str, run_id: int) -> list[dict[str, Any]]:
    run = get_run_for_user(request, team_slug, run_id)
    return [
        {"tool": s.name, "total": vars(s.total), "by_steps": [vars(r) for r in s.rows]}
        for s in analytics.tool_stats(run)
    ]


@router.get("/{team_slug}/compare", summary="The task x algorithm table of the team's finished runs")
def compare(request: HttpRequest, team_slug: str) -> dict[str, Any]:
    team = get_team_for_user(request, team_slug)
    matrix = analytics.comparison(team)
    return {
        "cells": [
            {"task": c.task, "algorithm": c.algorithm, "metric": c.key, "runs": c.run_ids,
             "final_mean": c.final[0], "final_std": c.final[1], "best_mean": c.best[0], "best_std": c.best[1]}
            for c in matrix.cells.values()
        ],
        "reference": [
            {"source": t.source, "method": m, "task": task, "metric": metric, "value": t.value(m, task, metric)}
            for t in analytics.reference_tables() for m in t.methods for task, metric in t.columns
            if t.value(m, task, metric) is not None
        ],
    }  # fmt: skip


# -- runs trained elsewhere -------------------------------------------------------------------------

_IMPORT_BODY = multipart_body(
    ["dump"],
    {
        "dump": {
            "type": "array",
            "items": {"type": "string", "format": "binary"},
            "description": "{global_step}.jsonl files of Agent-R1 or verl (docs/imports.md).",
        },
        "metrics": file_field("Optional JSONL metrics."),
        "experiment": text_field("Default: imports."),
        "name": text_field("The run's name."),
    },
)


class JobOut(Schema):
    """A job a request handed to a worker (docs/api.md#jobs): poll it until ``status`` is done or failed."""

    id: int
    kind: str
    status: str = Field(description="queued, running, done or failed")
    phase: str = Field(description="What the work is doing now.")
    done: int
    total: int = Field(description="What `done` counts up to in this phase; 0: no count.")
    message: str = Field(description="Why it failed.")
    result: dict[str, Any] = Field(
        description="What it made: an import's format, trajectories, points, steps; demonstrations' "
        "kept, dropped (reason → rows), examples (reason → first case) and dataset (its id)."
    )
    run: RunOut | None = Field(description="The run it made (an import), once done.")
    created: datetime
    finished_at: datetime | None


@router.post(
    "/{team_slug}/imports",
    response={202: JobOut},
    summary="Import a run trained elsewhere (Agent-R1 or verl dumps): a job to poll",
    openapi_extra=_IMPORT_BODY,
)
def import_run(request: HttpRequest, team_slug: str) -> Any:
    """Multipart: one or more `dump` files (`{global_step}.jsonl`), an optional `metrics` file. The
    answer is at once a job (202): a worker reads and stores the files; poll
    `GET .../imports/{id}` until it is done, when `run` is the new external run (finished, in the
    rollout viewer like a launched one). 413 past STUDIO_IMPORT_MAX_BYTES, 429 past the member's
    STUDIO_IMPORTS_PER_MEMBER imports at once (docs/imports.md#as-a-job)."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    try:
        import_jobs.check_before_upload(request)
        dumps, metrics = import_jobs.uploaded_files(request)
        if not dumps:
            raise import_jobs.ImportRefused("attach at least one {global_step}.jsonl file", field="dump")
        experiment = str(request.POST.get("experiment") or "imports").strip()[:200] or "imports"
        name = str(request.POST.get("name") or "").strip()[:200]
        if "\x00" in experiment + name:
            raise import_jobs.ImportRefused("must not contain NUL characters", field="name")
        upload = import_jobs.ImportRequest(team, request.user, experiment, name, dumps, metrics)
        job = import_jobs.start_import(upload)
    except import_jobs.ImportRefused as refused:
        if refused.field is None:
            raise HttpError(refused.status, str(refused)) from None
        raise FieldError([(refused.field, str(refused))], status=refused.status) from None
    return Status(202, job)


@router.get("/{team_slug}/imports/{int:pk}", response=JobOut, summary="One import: its progress and run")
def import_job(request: HttpRequest, team_slug: str, pk: int) -> Any:
    return get_job_for_user(request, team_slug, pk, import_jobs.IMPORT_JOB)


class DemonstrationsIn(StrictSchema):
    tools: dict[str, str] = Field(
        default_factory=dict,
        description="Which tool runs each recipe tool's calls (recipe tool → tool, e.g. "
        '{"lookup": "team_kv"}); a recipe tool left out runs on itself.',
    )


@router.post(
    "/{team_slug}/datasets/{int:pk}/demonstrations",
    response={202: JobOut},
    summary="Generate verified tool-use demonstrations of a dataset (docs/demonstrations.md): a job to poll",
)
def generate_demonstrations(request: HttpRequest, team_slug: str, pk: int, body: DemonstrationsIn) -> Any:
    dataset = get_dataset_for_user(request, team_slug, pk, write=True)
    try:
        job = demonstrations.start(dataset, request.user, body.tools)
    except DemonstrationsRefused as refused:
        raise HttpError(400, str(refused)) from None
    except TooManyJobs as refused:
        raise HttpError(429, str(refused)) from None
    return Status(202, job)


@router.get(
    "/{team_slug}/demonstrations/{int:pk}",
    response=JobOut,
    summary="One demonstrations job: its progress, then kept, dropped (by reason) and the new dataset",
)
def demonstrations_job(request: HttpRequest, team_slug: str, pk: int) -> Any:
    return get_job_for_user(request, team_slug, pk, demonstrations.DEMONSTRATIONS_JOB)
