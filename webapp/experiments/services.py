"""Operations that span a run and its executor: start, reconcile, cancel.

Celery tasks call these with a primary key; each is safe to run twice (the guarded transitions
on Run decide who acts).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import Field

from trainer.config import RunConfig
from trainer.contract import INT4_MAX
from webapp.experiments.confine import confined
from webapp.experiments.executors import EXECUTORS, ClusterTooSmall, ExecutorState, job_for, submission_id
from webapp.experiments.models import Experiment, Run, RunStatus

logger = logging.getLogger(__name__)

MAX_SEEDS = 20  # one run each: more is a sweep, not an experiment
MAX_NAME_LENGTH = 200  # an experiment's name; each run's name adds " · seed N" within Run.name's 250
MAX_DESCRIPTION_LENGTH = 10_000
RUN_NAME_MAX = 250
Seed = Annotated[int, Field(ge=0, le=INT4_MAX, description=f"A seed: 0 to {INT4_MAX}.")]

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


def creation_problems(config: RunConfig, task_names: Collection[str]) -> list[tuple[str, str]]:
    """What a new experiment's config may not be, beyond RunConfig's own checks: (field path, message)."""
    problems = []
    if config.task not in task_names:
        problems.append(
            ("task", f"unknown task {config.task!r}: set task to one of {', '.join(sorted(task_names))}")
        )
    if len(config.name) > MAX_NAME_LENGTH:
        problems.append(("name", f"at most {MAX_NAME_LENGTH} characters, not {len(config.name)}"))
    if not 0 <= config.trainer.seed <= INT4_MAX:
        problems.append(("trainer.seed", f"a seed lies between 0 and {INT4_MAX}"))
    return problems


def run_name(experiment: Experiment, seed: int) -> str:
    suffix = f" · seed {seed}"
    return experiment.name[: RUN_NAME_MAX - len(suffix)] + suffix


def create_experiment(team: Any, user: Any, config: RunConfig, seeds: list[int], *, description: str = "",
                      cloned_from: Experiment | None = None) -> Experiment:  # fmt: skip
    return Experiment.objects.create(
        team=team, name=config.name, description=description, task=config.task, preset=config.preset,
        config=json.loads(config.to_json()), seeds=seeds, created_by=user, cloned_from=cloned_from,
    )  # fmt: skip


def checkpoint_dir(run: Run) -> str:
    """Local runs keep checkpoints under STUDIO_VAR_DIR; Ray runs on storage every node shares."""
    base = Path(settings.SHARED_DIR) if run.executor == "ray" else Path(settings.VAR_DIR)
    return str(base / "runs" / str(run.pk) / "checkpoints")


@transaction.atomic
def launch(experiment: Experiment) -> list[Run]:
    """One queued run per seed, each with its own frozen config; the launch tasks go out on commit."""
    from webapp.experiments.tasks import launch_run

    # A config stored before the server-path rules were (docs/security.md#server-paths) must not
    # launch either: ConfigRefused, nothing created.
    base = confined(RunConfig.model_validate(experiment.config), experiment.team)
    runs = []
    for seed in experiment.seeds or [base.trainer.seed]:
        run = Run.objects.create(experiment=experiment, team=experiment.team, seed=seed, executor=base.executor,
                                 name=run_name(experiment, seed))  # fmt: skip
        config = base.with_overrides(**{"trainer.seed": seed, "trainer.checkpoint_dir": checkpoint_dir(run)})
        run.freeze_config(json.loads(config.to_json()))
        run.enqueue()
        launch_run.delay_on_commit(run.pk)
        runs.append(run)
    return runs
