"""Operations that span a run and its executor: start, reconcile, cancel.

Celery tasks call these with a primary key; each is safe to run twice (the guarded transitions
on Run decide who acts). What happens when a worker, a trainer or the cluster dies on the way is
docs/reliability.md.
"""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.celery import enqueue_on_commit
from webapp.experiments.executors import (
    Executor,
    ExecutorState,
    StartRefused,
    executor_of,
    job_for,
)
from webapp.experiments.models import (
    ACTIVE,
    LAUNCH_RUN_TASK,
    Experiment,
    Run,
    RunStatus,
    TeamRunLimit,
)
from webapp.experiments.run_files import run_files_dir
from webapp.experiments.waiting_line import started_count, waiting_line

logger = logging.getLogger(__name__)

CANCELLED_EXIT_CODES = (130, 143, -15)  # SIGINT / SIGTERM: the trainer finished its step and stopped
# A start lost this many times (the worker launching it died each time) fails instead of being retried.
MAX_LAUNCH_ATTEMPTS = 3


def start_run(run: Run) -> None:
    """queued → starting, then hand the run to its executor with a fresh per-run token."""
    executor = executor_of(run)
    if not _admit(run, executor):
        return
    try:
        ref = executor.start(run, run.issue_token())
    except StartRefused as exc:  # the cluster precheck, a run reported from outside
        logger.info("run %s refused by its executor: %s", run.pk, exc)
        run.finish(RunStatus.FAILED, str(exc))
        return
    except Exception as exc:  # any failure to start is the run's failure, shown on its page
        logger.exception("run %s could not start", run.pk)
        run.finish(RunStatus.FAILED, f"could not start on the {run.executor} executor: {exc}")
        return
    run.record_executor_ref(ref)


def _admit(run: Run, executor: Executor) -> bool:
    """queued → starting if the team's limit on active runs has a place for it (when its executor
    is limited by the team) and it is first in line; else it stays queued, held, for the reaper to
    start in turn (docs/sweeps.md#limit)."""
    planned_ref = executor.planned_ref(run)
    if not executor.limited_by_team:
        return _mark_starting(run, planned_ref)
    with transaction.atomic():
        # Race: two workers starting two queued runs of one team at once would each count the same
        # free place. The team's row lock makes the second count after the first's start commits.
        Team.objects.select_for_update().filter(pk=run.team_id).first()
        free = TeamRunLimit.of(run.team_id) - started_count(run.team_id)
        ahead = list(waiting_line(run.team_id).values_list("pk", flat=True)[: max(free, 0)])
        if run.pk not in ahead:
            if run.hold():
                logger.info("run %s waits queued: its team's limit of active runs is reached", run.pk)
            return False
        return _mark_starting(run, planned_ref)


def _mark_starting(run: Run, planned_ref: str) -> bool:
    if not run.mark_starting(planned_ref):
        logger.info("run %s is %s, not queued: not starting it again", run.pk, run.status)
        return False
    return True


def next_in_line(team_id: int) -> list[int]:
    """The held runs of the team the limit has places for now, first in line first."""
    free = TeamRunLimit.of(team_id) - started_count(team_id)
    if free <= 0:
        return []
    heads = waiting_line(team_id)[:free]
    return [run.pk for run in heads if run.held_at is not None]


def reconcile(run: Run) -> None:
    """Bring the run's status in line with what its executor says (the reaper's one step)."""
    if run.is_terminal or not executor_of(run).reaped or run.status == RunStatus.QUEUED:
        return  # a queued run's lost task is resent by requeue_lost_launches
    if not run.executor_ref:
        if not _locate(run):
            recover_lost_start(run)
            return
        if run.cancel_requested:
            _cancel_recovered_start(run)
            return
    state = _poll(run)
    if state is None:
        _watch_silence(run)  # the executor cannot be asked: the run's own reports still can
        return
    if not state.started:
        recover_lost_start(run)
        return
    if state.node and state.node != run.node:
        run.record_node(state.node)  # the run page shows where it runs (docs/ray.md#several-nodes)
    if state.alive and state.pending and state.message and not run.cancel_requested:
        run.note_waiting(state.message)
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
    _clean_up(run)


def _poll(run: Run) -> ExecutorState | None:
    try:
        return executor_of(run).poll(run)
    except Exception as exc:  # an unreachable cluster is not a verdict on the run
        logger.warning("could not poll run %s on %s: %s", run.pk, run.executor, exc)
        started = run.starting_at or run.queued_at or run.created
        if run.status == RunStatus.STARTING and timezone.now() - started > timedelta(
            seconds=settings.STALL_AFTER_S
        ):
            run.finish(RunStatus.FAILED, f"the {run.executor} executor lost the run: {exc}")
        return None


def _watch_live_run(run: Run) -> None:
    if run.cancel_requested and run.cancel_requested_at:
        if timezone.now() - run.cancel_requested_at > timedelta(seconds=settings.CANCEL_GRACE_S):
            logger.warning("run %s ignored SIGTERM for %s s; killing it", run.pk, settings.CANCEL_GRACE_S)
            executor_of(run).stop(run, force=True)
        return
    _watch_silence(run)


def _watch_silence(run: Run) -> None:
    """The watchdog (docs/reliability.md#stalls): a claimed run silent for STUDIO_FAIL_AFTER_S is
    failed and its process killed (a hung trainer); one silent for STUDIO_STALL_AFTER_S is stalled."""
    fail_after = settings.FAIL_AFTER_S
    if fail_after and run.fail_if_silent(_hung_message(fail_after), fail_after):
        logger.warning("run %s failed: silent for %s s; killing its process", run.pk, fail_after)
        _stop_quietly(run, force=True)  # SIGKILL: a stopped (SIGSTOP) process never handles SIGTERM
        _clean_up(run)
        return
    if Run.silent_since(settings.STALL_AFTER_S).filter(pk=run.pk).exists():
        run.mark_stalled(_stall_message(run), settings.STALL_AFTER_S)


def _hung_message(limit: int) -> str:
    return (
        f"no heartbeat or progress for {limit} s (STUDIO_FAIL_AFTER_S): the trainer was taken for hung "
        "and killed"
    )


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
        return  # a start that left no ref is cancelled by the reaper (recover_lost_start)
    _stop_quietly(run)


def _stop_quietly(run: Run, *, force: bool = False) -> None:
    try:
        executor_of(run).stop(run, force=force)
    except Exception as exc:
        logger.warning("could not stop run %s: %s", run.pk, exc)


def _clean_up(run: Run) -> None:
    """The ended run's scratch space (its dataset copy, its temporary files) goes; its log stays."""
    try:
        executor_of(run).clean_up(run)
    except OSError as exc:
        logger.warning("could not remove the scratch space of run %s: %s", run.pk, exc)


# --- lost starts (docs/reliability.md#lost-launch) -------------------------------------------------


def _locate(run: Run) -> bool:
    """Find a start whose executor ref was never recorded (the launching worker died between
    starting the process and recording it) and record it; True when found."""
    ref = executor_of(run).locate(run)
    if ref:
        logger.warning("run %s: recovered the unrecorded start %s", run.pk, ref)
        run.record_executor_ref(ref)
    return bool(ref)


def _cancel_recovered_start(run: Run) -> None:
    """A cancel pressed while the start was lost never reached the trainer (there was no process
    to signal): it trained on against the user's wish meanwhile, so it is killed now and the run
    ends cancelled; a "succeeded" it reports later changes nothing (docs/reliability.md#lost-launch)."""
    logger.warning("run %s: its recovered start was cancelled meanwhile; killing it", run.pk)
    _stop_quietly(run, force=True)
    run.finish(RunStatus.CANCELLED)
    _clean_up(run)


def recover_lost_start(run: Run) -> None:
    """A start the executor has no trace of: the worker launching it died before handing it over
    (Celery does not redeliver such a task in time). Cancelled if asked, started again after
    STUDIO_RELAUNCH_AFTER_S, at most MAX_LAUNCH_ATTEMPTS times, else failed. A run a trainer claimed
    is its trainer's: the watchdog judges it by what it reports."""
    if run.claimant:
        _watch_silence(run)
        return
    if run.status != RunStatus.STARTING:
        return
    if run.cancel_requested:
        run.finish(RunStatus.CANCELLED, "cancelled before it started")
        return
    began = run.starting_at or run.queued_at or run.created
    if timezone.now() - began < timedelta(seconds=settings.RELAUNCH_AFTER_S):
        return  # its launch task may still be handing it over
    if run.launch_attempts >= MAX_LAUNCH_ATTEMPTS:
        run.finish(
            RunStatus.FAILED,
            f"the run's start was lost {run.launch_attempts} times (the worker starting it died); "
            "launch the experiment again",
        )
        return
    if run.requeue_lost_start():
        logger.warning(
            "run %s: its start was lost (attempt %s); launching it again", run.pk, run.launch_attempts
        )
        enqueue_on_commit(LAUNCH_RUN_TASK, run.pk)


def requeue_lost_launches() -> list[int]:
    """Queued runs whose launch task was lost (broker flushed, worker died) are sent again, and the
    held runs whose turn has come (docs/sweeps.md#limit)."""
    cutoff = timezone.now() - timedelta(seconds=settings.RELAUNCH_AFTER_S)
    lost = Run.objects.filter(status=RunStatus.QUEUED, queued_at__lt=cutoff, held_at__isnull=True)
    teams = Run.objects.filter(status=RunStatus.QUEUED, held_at__isnull=False).values_list(
        "team_id", flat=True
    )
    due = [pk for team_id in sorted(set(teams)) for pk in next_in_line(team_id)]
    return list(lost.values_list("pk", flat=True)) + due


# --- deleting and a run's files ----------------------------------------------------------------------


@transaction.atomic
def delete_experiment(experiment: Experiment) -> bool:
    """Delete the experiment with its runs and everything they produced; False (nothing deleted)
    while one of its runs is active: its trainer still reports."""
    # Race: a launch while this runs; the experiment's row lock (Experiment.launch takes it too) orders them.
    Experiment.objects.select_for_update().filter(pk=experiment.pk).first()
    if experiment.runs.filter(status__in=ACTIVE).exists():
        return False
    experiment.delete()
    return True


def delete_run_files(sender: type[Run], instance: Run, **kwargs: Any) -> None:
    """post_delete of a Run (also a cascade from its experiment or team): its folder goes once the
    deletion commits, so a rolled-back delete keeps the files (docs/checkpoints.md#deleting-a-run).
    Only the folder the studio made is removed, never a path a config names."""
    folder = run_files_dir(instance)
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))
