"""Operations that span a run and its executor: start, reconcile, cancel.

Celery tasks call these with a primary key; each is safe to run twice (the guarded transitions
on Run decide who acts).
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainer.config import RunConfig
from webapp.experiments.executors import EXECUTORS, ClusterTooSmall, ExecutorState, job_for, submission_id
from webapp.experiments.models import Experiment, Run, RunStatus

logger = logging.getLogger(__name__)

CANCELLED_EXIT_CODES = (130, 143, -15)  # SIGINT / SIGTERM: the trainer finished its step and stopped


def start_run(run: Run) -> None:
    """queued → starting, then hand the run to its executor with a fresh per-run token."""
    planned_ref = f"ray:{submission_id(run)}" if run.executor == "ray" else ""
    if not run.mark_starting(planned_ref):
        logger.info("run %s is %s, not queued: not starting it again", run.pk, run.status)
        return
    executor = EXECUTORS.get(run.executor)
    try:
        ref = executor.start(run, run.issue_token())
    except ClusterTooSmall as exc:
        logger.info("run %s refused by the cluster precheck: %s", run.pk, exc)
        run.finish(RunStatus.FAILED, str(exc))
        return
    except Exception as exc:  # any failure to start is the run's failure, shown on its page
        logger.exception("run %s could not start", run.pk)
        run.finish(RunStatus.FAILED, f"could not start on the {run.executor} executor: {exc}")
        return
    run.record_executor_ref(ref)


def reconcile(run: Run) -> None:
    """Bring the run's status in line with what its executor says (the reaper's one step)."""
    if run.is_terminal or not run.executor_ref:
        return
    state = _poll(run)
    if state is None:
        return
    if state.alive and state.pending and run.cancel_requested:
        # Ray cannot stop a PENDING job (ray-project/ray#58353): stop_job only queues a stop for a
        # supervisor that does not exist yet. Nothing of the run has started, so it ends here; if
        # the job ever starts, its trainer finds the run cancelled, cannot claim it and exits.
        run.finish(RunStatus.CANCELLED, "cancelled while the Ray job was still waiting for resources")
        return
    if state.alive:
        _watch_live_run(run)
        return
    if run.cancel_requested or state.stopped or state.exit_code in CANCELLED_EXIT_CODES:
        run.finish(RunStatus.CANCELLED, state.message or "cancelled")
    elif state.exit_code == 0:
        run.finish(RunStatus.SUCCEEDED, state.message)
    else:
        run.finish(RunStatus.FAILED, state.message)


def _poll(run: Run) -> ExecutorState | None:
    try:
        return EXECUTORS.get(run.executor).poll(run)
    except Exception as exc:  # an unreachable cluster is not a verdict on the run
        logger.warning("could not poll run %s on %s: %s", run.pk, run.executor, exc)
        started = run.queued_at or run.created
        if run.status == RunStatus.STARTING and timezone.now() - started > timedelta(
            seconds=settings.STALL_AFTER_S
        ):
            run.finish(RunStatus.FAILED, f"the {run.executor} executor lost the run: {exc}")
        return None


def _watch_live_run(run: Run) -> None:
    if run.cancel_requested and run.cancel_requested_at:
        if timezone.now() - run.cancel_requested_at > timedelta(seconds=settings.CANCEL_GRACE_S):
            logger.warning("run %s ignored SIGTERM for %s s; killing it", run.pk, settings.CANCEL_GRACE_S)
            EXECUTORS.get(run.executor).stop(run, force=True)
        return
    if Run.silent_since(settings.STALL_AFTER_S).filter(pk=run.pk).exists():
        run.mark_stalled(_stall_message(run), settings.STALL_AFTER_S)


def _stall_message(run: Run) -> str:
    limit = settings.STALL_AFTER_S
    if run.status == RunStatus.STARTING:
        # A Ray job stays PENDING while the cluster cannot place its entrypoint.
        return f"the {run.executor} executor has not started the trainer within {limit} s (waiting for resources?)"
    message = f"no heartbeat or progress for {limit} s while the trainer is alive"
    try:
        hint = job_for(run).stall_hint
    except ValueError:  # a stored config this version refuses: the stall is news all the same
        hint = ""
    return f"{message}: {hint}" if hint else message


def stop_executor(run: Run) -> None:
    """After Run.request_cancel: SIGTERM the process group / stop the Ray job; the reaper finishes the run."""
    if run.is_terminal or not run.executor_ref:
        return
    try:
        EXECUTORS.get(run.executor).stop(run)
    except Exception as exc:
        logger.warning("could not stop run %s: %s", run.pk, exc)


def requeue_lost_launches() -> list[int]:
    """Queued runs whose launch task was lost (broker flushed, worker died) are sent again."""
    cutoff = timezone.now() - timedelta(seconds=settings.RELAUNCH_AFTER_S)
    return list(
        Run.objects.filter(status=RunStatus.QUEUED, queued_at__lt=cutoff).values_list("pk", flat=True)
    )


# --- creating and launching ----------------------------------------------------------------------


def create_experiment(team: Any, user: Any, config: RunConfig, seeds: list[int], *, description: str = "",
                      cloned_from: Experiment | None = None) -> Experiment:  # fmt: skip
    return Experiment.objects.create(
        team=team, name=config.name, description=description, task=config.task, preset=config.preset,
        config=json.loads(config.to_json()), seeds=seeds, created_by=user, cloned_from=cloned_from,
    )  # fmt: skip


def run_files_dir(run: Run) -> Path:
    """The folder of a run's files: under STUDIO_VAR_DIR for local runs, on storage every node shares
    for Ray runs."""
    base = Path(settings.SHARED_DIR) if run.executor == "ray" else Path(settings.VAR_DIR)
    return base / "runs" / str(run.pk)


def checkpoint_dir(run: Run) -> str:
    return str(run_files_dir(run) / "checkpoints")


def delete_run_files(sender: type[Run], instance: Run, **kwargs: Any) -> None:
    """post_delete of a Run (also a cascade from its experiment or team): its folder goes once the
    deletion commits, so a rolled-back delete keeps the files (docs/checkpoints.md#deleting-a-run).
    Only the folder the studio made is removed, never a path a config names."""
    folder = run_files_dir(instance)
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


@transaction.atomic
def launch(experiment: Experiment) -> list[Run]:
    """One queued run per seed, each with its own frozen config; the launch tasks go out on commit."""
    from webapp.experiments.tasks import launch_run

    base = RunConfig.model_validate(experiment.config)
    runs = []
    for seed in experiment.seeds or [base.trainer.seed]:
        run = Run.objects.create(experiment=experiment, team=experiment.team, seed=seed, executor=base.executor,
                                 name=f"{experiment.name} · seed {seed}")  # fmt: skip
        config = base.with_overrides(**{"trainer.seed": seed, "trainer.checkpoint_dir": checkpoint_dir(run)})
        run.freeze_config(json.loads(config.to_json()))
        run.enqueue()
        launch_run.delay_on_commit(run.pk)
        runs.append(run)
    return runs
