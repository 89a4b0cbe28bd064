"""The ingestion API the trainer posts to (paths and bodies: :mod:`trainer.report`).

Every request carries the run's own token; a token for another run is a 404, as if the run did
not exist. Bodies may be gzipped (:class:`webapp.results.middleware.GzipRequestMiddleware`).
Batches with a ``batch_id`` are idempotent: a replay answers 200 and stores nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import connection, transaction
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Router, Schema, Status
from ninja.errors import HttpError

from trainer.contract import (
    IDEMPOTENCY_HEADER,
    CheckpointRecord,
    Heartbeat,
    LogChunk,
    MetricBatch,
    StatusUpdate,
    TrajectoryBatch,
)
from webapp.api import RunTokenAuth, api
from webapp.experiments.models import TERMINAL, Run, RunStatus
from webapp.results import metrics_store, rollouts
from webapp.results.metrics_store import BadBatch, claim_batch
from webapp.results.models import Checkpoint

ingest_router = Router(auth=RunTokenAuth(), tags=["ingestion (trainer)"])
config_router = Router(auth=RunTokenAuth(), tags=["ingestion (trainer)"])
api.extra_schemas.append(MetricBatch)


def _own_run(request: HttpRequest, run_id: int) -> Run:
    run: Run = request.auth  # type: ignore[attr-defined]
    if run.pk != run_id:
        raise Http404("no such run")
    return run


def _batch_id(request: HttpRequest, body_id: str | None, body: bytes) -> str:
    # The body's own id first; then the header; a body with neither is keyed by its content, so
    # sending the same bytes twice still stores them once.
    return body_id or request.headers.get(IDEMPOTENCY_HEADER) or hashlib.sha256(body).hexdigest()[:64]


@ingest_router.post(
    "/{int:run_id}/metrics",
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
    with a message naming it; a replayed batch_id stores nothing."""
    run = _own_run(request, run_id)
    try:
        batch_id, points = metrics_store.parse_batch(request.body)
    except BadBatch as error:
        raise HttpError(400, str(error)) from None
    result = metrics_store.write_points(run.pk, _batch_id(request, batch_id, request.body), points)
    return {"stored": result.stored, "skipped": result.skipped, "duplicate": result.duplicate_batch}


@ingest_router.post("/{int:run_id}/trajectories", summary="Store trajectories with all their steps")
def post_trajectories(request: HttpRequest, run_id: int, batch: TrajectoryBatch) -> dict[str, Any]:
    run = _own_run(request, run_id)
    result = rollouts.store_batch(run, batch, _batch_id(request, batch.batch_id, request.body))
    run.note_progress()  # verl's rollouts have no step counter of ours: their arrival is the progress
    return {"stored": result.stored, "skipped": result.skipped, "duplicate": result.duplicate_batch}


@ingest_router.post(
    "/{int:run_id}/status", summary="Report the run's status", response={200: dict, 409: dict}
)
def post_status(request: HttpRequest, run_id: int, update: StatusUpdate) -> Any:
    """running → the run is claimed by this process; succeeded/failed/cancelled → it finishes
    (the first terminal state wins); starting → only the message is kept."""
    run = _own_run(request, run_id)
    with transaction.atomic():
        if not claim_batch(run.pk, update.batch_id, "status"):
            return {"status": run.status, "duplicate": True}
        changed = _apply_status(request, run, update)
    if not changed and update.status == RunStatus.RUNNING and run.status != RunStatus.RUNNING:
        return Status(409, {"error": f"the run is {run.status} and cannot start", "status": run.status})
    return {"status": run.status, "changed": changed, "cancel_requested": run.cancel_requested}


def _apply_status(request: HttpRequest, run: Run, update: StatusUpdate) -> bool:
    if update.status in TERMINAL:
        return run.finish(update.status, update.message)
    if update.status == RunStatus.RUNNING:
        worker = request.headers.get("User-Agent", "trainer")[:200]
        return run.claim(worker) or (run.status == RunStatus.RUNNING)
    # starting: the launcher already moved the run; the trainer only says what it is doing.
    return (
        Run.objects.filter(pk=run.pk, status__in=(RunStatus.QUEUED, RunStatus.STARTING)).update(
            message=update.message
        )
        == 1
    )


@ingest_router.post(
    "/{int:run_id}/heartbeat", summary="Say the trainer is alive", response={200: dict, 409: dict}
)
def post_heartbeat(request: HttpRequest, run_id: int, beat: Heartbeat) -> Any:
    run = _own_run(request, run_id)
    if not run.heartbeat(beat.step, beat.total_steps):
        return Status(409, {"error": f"the run is {run.status}", "status": run.status})
    return {"status": run.status, "cancel_requested": run.cancel_requested}


@ingest_router.post("/{int:run_id}/logs", summary="Append a chunk of the trainer's log")
def post_logs(request: HttpRequest, run_id: int, chunk: LogChunk) -> dict[str, Any]:
    run = _own_run(request, run_id)
    with connection.cursor() as cursor:
        # Chunks are numbered by the trainer; a replay of seq n finds it stored and adds nothing.
        cursor.execute(
            "INSERT INTO results_logchunk (run_id, seq, text, received) VALUES (%s, %s, %s, now()) "
            "ON CONFLICT DO NOTHING",
            [run.pk, chunk.seq, chunk.text],
        )
        stored = cursor.rowcount == 1
    return {"stored": int(stored), "duplicate": not stored}


@ingest_router.post("/{int:run_id}/checkpoints", summary="Record a saved checkpoint")
def post_checkpoint(request: HttpRequest, run_id: int, record: CheckpointRecord) -> dict[str, Any]:
    run = _own_run(request, run_id)
    with transaction.atomic():
        if not claim_batch(run.pk, record.batch_id, "checkpoints"):
            return {"stored": 0, "duplicate": True}
        Checkpoint.objects.create(run=run, step=record.step, path=record.path, metrics=record.metrics)
    return {"stored": 1, "duplicate": False}


@config_router.get("/{int:run_id}/config", summary="The run's frozen RunConfig (JSON)")
def get_config(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _own_run(request, run_id)
    return api.create_response(request, run.config, status=200)


class ClaimIn(Schema):
    worker: str = ""


@config_router.post(
    "/{int:run_id}/claim", summary="Take ownership of the run", response={200: dict, 409: dict}
)
def post_claim(request: HttpRequest, run_id: int, body: ClaimIn) -> Any:
    """The trainer calls this before reporting anything: only one process may own a run (a retried
    launch must not train it twice). 409 when the run is owned already or cannot start."""
    run = _own_run(request, run_id)
    worker = body.worker[:200] or "trainer"
    if not run.claim(worker):
        return Status(
            409,
            {"error": f"the run is {run.status} (owner: {run.claimed_by or 'none'})", "status": run.status},
        )
    return {"status": run.status, "claimed_by": run.claimed_by}
