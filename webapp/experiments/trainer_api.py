"""The trainer's calls about its run's life, beside the Run state machine they drive: claim the
run, read its frozen config, report its status, send heartbeats (paths and bodies: trainer.contract).

Every request carries the run's own token; a token for another run is a 404. The trainer claims
once, before anything else; no other call claims. A status or heartbeat must carry the claimant id
the claim recorded: any other process is a 409 and changes nothing. Each call is safe to repeat: a
claim retried by the same claimant is answered yes again, the first terminal status wins, a heartbeat
only moves time on.

The trainer's dataset download (DATASET_PATH) is here too: the run's frozen config names its data as
``dataset:<id>`` in ``data.train_path`` / ``data.val_path``; the file served is that dataset of the
run's own team, and only while it is valid.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from ninja import Router, Status
from ninja.errors import HttpError

from trainer.contract import (
    CLAIM_PATH,
    CONFIG_PATH,
    DATASET_PATH,
    HEARTBEAT_PATH,
    SPECS_PATH,
    STATUS_PATH,
    ClaimRequest,
    Heartbeat,
    RunSpecs,
    StatusUpdate,
)
from webapp.api import api, route
from webapp.datasets.files import parquet_download
from webapp.datasets.models import Dataset
from webapp.experiments.lifecycle import CLAIMED, RunStatus
from webapp.experiments.run_auth import RunTokenAuth, get_run_for_claimant, get_run_for_token
from webapp.experiments.tasks import start_next

router = Router(auth=RunTokenAuth(), tags=["run lifecycle (trainer)"])


@router.post(route(CLAIM_PATH), summary="Take ownership of the run", response={200: dict, 409: dict})
def post_claim(request: HttpRequest, run_id: int, body: ClaimRequest) -> Any:
    """The trainer calls this before reporting anything: only one process may own a run (a retried
    launch must not train it twice). 409 when another process owns it or it cannot start."""
    run = get_run_for_token(request, run_id)
    if not run.claim(body.worker, body.claimant):
        return Status(
            409,
            {"error": f"the run is {run.status} (owner: {run.claimed_by or 'none'})", "status": run.status},
        )
    return {"status": run.status, "claimed_by": run.claimed_by}


@router.get(route(CONFIG_PATH), summary="The run's frozen RunConfig (JSON)")
def get_config(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_run_for_token(request, run_id)
    return api.create_response(request, run.config, status=200)


@router.post(route(STATUS_PATH), summary="Report the run's status", response={200: dict, 409: dict})
def post_status(request: HttpRequest, run_id: int, update: StatusUpdate) -> Any:
    """succeeded/failed/cancelled → the run finishes (the first terminal state wins); starting and
    running → only the message is kept. 409 from any process but the claimant."""
    run = get_run_for_claimant(request, run_id)
    changed = run.report(update.status, update.message)
    if changed and run.is_terminal:
        start_next.delay_on_commit(run.team_id)  # its place goes to the next in line (docs/sweeps.md#limit)
    if update.status == RunStatus.RUNNING and run.status not in CLAIMED:
        return Status(
            409,
            {
                "error": f"the run is {run.status}: only a run its trainer claimed can be running",
                "status": run.status,
            },
        )
    return {"status": run.status, "changed": changed, "cancel_requested": run.cancel_requested}


@router.post(route(HEARTBEAT_PATH), summary="Say the trainer is alive", response={200: dict, 409: dict})
def post_heartbeat(request: HttpRequest, run_id: int, beat: Heartbeat) -> Any:
    run = get_run_for_claimant(request, run_id)
    if not run.heartbeat(beat.step, beat.total_steps):
        return Status(409, {"error": f"the run is {run.status}", "status": run.status})
    return {"status": run.status, "cancel_requested": run.cancel_requested}


@router.get(
    route(SPECS_PATH),
    summary="The run's team tools and rewards, secrets included",
    response={200: RunSpecs, 409: dict},
)
def get_specs(request: HttpRequest, run_id: int) -> Any:
    """What the run's config names of its team's tools and rewards, for its claimed trainer only (the
    trainer process, and verl's workers, call this with the run's token). 409 names a tool or reward
    that can no longer be used, so the run fails before training (docs/tools.md#team-tools-in-runs)."""
    from webapp.tools.models import ToolUnavailable, specs_for_run

    run = get_run_for_token(request, run_id)
    if run.status not in CLAIMED:
        return Status(409, {"error": f"the run is {run.status}: only a claimed run receives its tools"})
    config = run.config
    tools = list((config.get("rollout") or {}).get("tools") or [])
    rewards = sorted(set(((config.get("data") or {}).get("rewards") or {}).values()))
    try:
        return specs_for_run(run.team, tools, rewards)
    except ToolUnavailable as exc:
        return Status(409, {"error": str(exc)})


datasets_router = Router(auth=RunTokenAuth(), tags=["datasets (trainer)"])

SPLITS = ("train", "val")


@datasets_router.get(
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
    return parquet_download(dataset.path, f"{split}.parquet")
