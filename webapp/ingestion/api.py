"""The ingestion API: what a run produces, posted by its trainer (paths and bodies: trainer.contract).

Every request carries the run's own token; a token for another run is a 404, as if the run did
not exist, and the claimant id of the process that claimed the run: any other process is a 409.
Bodies may be gzipped (:class:`webapp.ingestion.middleware.GzipRequestMiddleware`).
Batches with a ``batch_id`` are idempotent: a replay answers 200 and stores nothing. The run's
life (claim, config, status, heartbeat) is :mod:`webapp.experiments.trainer_api`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction
from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import HttpError
from pydantic import ValidationError

from trainer.contract import (
    CHECKPOINTS_PATH,
    IDEMPOTENCY_HEADER,
    LOGS_PATH,
    METRICS_PATH,
    TOKEN_SIGNALS_PATH,
    TRAJECTORIES_PATH,
    CheckpointRecord,
    LogChunk,
    MetricBatch,
    TokenSignalsBatch,
    TrajectoryBatch,
)
from webapp.api import FieldError, api, route
from webapp.experiments.jobs import Job, JobKind, JobRefused, TooManyJobs
from webapp.experiments.models import Run
from webapp.experiments.run_auth import RunTokenAuth, get_run_for_claimant
from webapp.ingestion import metrics_store, token_signals, trajectories
from webapp.ingestion.checkpoint_keeping import apply_keep_policy
from webapp.ingestion.metrics_store import BadBatch
from webapp.ingestion.models import Checkpoint
from webapp.ingestion.models import LogChunk as StoredLogChunk
from webapp.ingestion.signals import metrics_stored

router = Router(auth=RunTokenAuth(), tags=["ingestion (trainer)"])
api.extra_schemas.append(MetricBatch)


def _batch_id(request: HttpRequest, body_id: str | None, body: bytes) -> str:
    # The body's own id first; then the header; a body with neither is keyed by its content, so
    # sending the same bytes twice still stores them once.
    return body_id or request.headers.get(IDEMPOTENCY_HEADER) or hashlib.sha256(body).hexdigest()[:64]


@router.post(
    route(METRICS_PATH),
    summary="Store a batch of metric points",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MetricBatch"}}},
        }
    },
)
def post_metrics(request: HttpRequest, run_id: int) -> dict[str, Any]:
    """A MetricBatch (10,000+ points fine; gzip welcome). A bad point rejects the whole batch (400)
    with a message naming it; a replayed batch_id stores nothing. A point under one of verl's keys
    is stored under ours as well (trainer.backends.canonical_key)."""
    run = get_run_for_claimant(request, run_id)
    try:
        batch_id, points = metrics_store.parse_batch(request.body)
    except BadBatch as error:
        raise HttpError(400, str(error)) from None
    # One transaction, so one WAL flush per batch (docs/reliability.md#ingestion-under-many-trainers).
    with transaction.atomic():
        result = metrics_store.write_points(run.pk, _batch_id(request, batch_id, request.body), points)
        if not result.duplicate_batch:
            metrics_stored.send(sender=Run, run=run, points=metrics_store.with_our_keys(points))
        if points:
            # A trainer draining a backlog of metrics is alive and working (docs/reliability.md#stalls).
            # Last, so the run's row is locked for the shortest time.
            run.note_progress(max(point["step"] for point in points))
    return {"stored": result.stored, "skipped": result.skipped, "duplicate": result.duplicate_batch}


@router.post(route(TRAJECTORIES_PATH), summary="Store trajectories with all their steps")
def post_trajectories(request: HttpRequest, run_id: int, batch: TrajectoryBatch) -> dict[str, Any]:
    run = get_run_for_claimant(request, run_id)
    result = trajectories.store_batch(run, batch, _batch_id(request, batch.batch_id, request.body))
    run.note_progress()  # verl's rollouts have no step counter of ours: their arrival is the progress
    return {"stored": result.stored, "skipped": result.skipped, "dropped": result.dropped,
            "duplicate": result.duplicate_batch}  # fmt: skip


# Token signals (docs/rollouts.md#token-signals): a trainer sends at most a few hundred steps a
# batch (the HttpReporter 32). A body larger than this, or with more steps, is stored by a worker
# (answered 202 with its job); the request never holds a web thread for long (docs/api.md#jobs).
SIGNALS_INLINE_BYTES = 8 * 2**20
SIGNALS_INLINE_STEPS = 512
SIGNALS_MAX_STEPS = 20_000  # per body: 413 above it, in the request or in its job
SIGNALS_JOBS_PER_RUN = 4  # queued or running at once; more answer 429, which the reporter retries
SIGNALS_JOB = "token-signals"
SIGNALS_TASK = "webapp.ingestion.tasks.store_token_signals_task"
SIGNALS = JobKind(SIGNALS_JOB, SIGNALS_TASK, most=SIGNALS_JOBS_PER_RUN, per="run")
api.extra_schemas.append(TokenSignalsBatch)


@router.post(
    route(TOKEN_SIGNALS_PATH),
    summary="Add per-token signals to steps already reported",
    response={200: dict, 202: dict},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenSignalsBatch"}}},
        }
    },
)
def post_token_signals(request: HttpRequest, run_id: int) -> Any:
    """Signals a backend computes after it reported the trajectory (verl). A step whose trajectory
    has not arrived yet waits for it (``waiting``); a step its stored trajectory lacks is ``missing``.
    A large body (over 8 MiB unpacked, or 512 steps) is stored by a worker: 202 with its ``job``;
    more than 20,000 steps is a 413; more than 4 such jobs of one run at once a 429."""
    run = get_run_for_claimant(request, run_id)
    body = request.body
    if len(body) <= SIGNALS_INLINE_BYTES:
        batch = _signals_batch(body)
        if len(batch.steps) <= SIGNALS_INLINE_STEPS:
            result = token_signals.store_token_signals(run, batch, _batch_id(request, batch.batch_id, body))
            return {
                "stored": result.stored,
                "waiting": result.waiting,
                "missing": result.missing,
                "duplicate": result.duplicate_batch,
            }
    return Status(202, {"job": _queue_signals(run, body, request.headers.get(IDEMPOTENCY_HEADER)).pk})


def _signals_batch(body: bytes) -> TokenSignalsBatch:
    try:
        batch = TokenSignalsBatch.model_validate_json(body)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        raise FieldError([(".".join(map(str, first["loc"])) or "body", first["msg"])]) from None
    if len(batch.steps) > SIGNALS_MAX_STEPS:
        raise HttpError(
            413, f"{len(batch.steps)} steps in one body; at most {SIGNALS_MAX_STEPS}: send them in batches"
        )
    return batch


def _queue_signals(run: Run, body: bytes, header_id: str | None) -> Job:
    try:
        job = Job.start(SIGNALS, run.team, run=run, options={"batch_id": header_id})
    except TooManyJobs as error:
        raise HttpError(429, f"run {run.pk}: {error}") from None
    job.folder.mkdir(parents=True, exist_ok=True)
    (job.folder / "body.json").write_bytes(body)
    job.enqueue()
    return job


def store_signals_job(job: Job) -> dict[str, Any]:
    """A large token-signals body, stored by a worker; a refusal is counted on the run, whose page
    shows it, as the trainer's other refused reports are (docs/security.md#refusals)."""
    if job.run is None:
        raise JobRefused("its run was deleted")
    body = (job.folder / "body.json").read_bytes()
    try:
        batch = _signals_batch(body)
    except HttpError as refused:
        job.run.note_refused(f"{TOKEN_SIGNALS_PATH.format(run_id=job.run_id)}: {refused.message}")
        raise JobRefused(refused.message) from None
    job.progress(f"storing the signals of {len(batch.steps)} steps")
    batch_id = batch.batch_id or job.options.get("batch_id") or hashlib.sha256(body).hexdigest()[:64]
    result = token_signals.store_token_signals(job.run, batch, batch_id)
    return {
        "stored": result.stored,
        "waiting": result.waiting,
        "missing": result.missing,
        "duplicate": result.duplicate_batch,
    }


@router.post(route(LOGS_PATH), summary="Append a chunk of the trainer's log")
def post_logs(request: HttpRequest, run_id: int, chunk: LogChunk) -> dict[str, Any]:
    run = get_run_for_claimant(request, run_id)
    stored = StoredLogChunk.append(run, chunk.seq, chunk.text)
    return {"stored": int(stored), "duplicate": not stored}


@router.post(route(CHECKPOINTS_PATH), summary="Record a saved checkpoint")
def post_checkpoint(request: HttpRequest, run_id: int, record: CheckpointRecord) -> dict[str, Any]:
    run = get_run_for_claimant(request, run_id)
    stored = Checkpoint.record(run, record.batch_id, record)
    if stored and not record.deleted:
        # The experiment's keep-policy decides what stays (docs/checkpoints.md#keep-policies).
        apply_keep_policy(run)
    return {"stored": int(stored), "duplicate": not stored}
