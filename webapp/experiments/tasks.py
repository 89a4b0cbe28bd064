from __future__ import annotations

import logging

from celery import shared_task

from webapp.experiments import demonstrations, services
from webapp.experiments.demonstrations import DEMONSTRATIONS_JOB, DEMONSTRATIONS_TASK
from webapp.experiments.executors import reaped_executors
from webapp.experiments.jobs import Job
from webapp.experiments.models import ACTIVE, LAUNCH_RUN_TASK, Run
from webapp.guarded import one_at_a_time

logger = logging.getLogger(__name__)
# Held by the reaper's pass: one pass at a time over every worker (docs/deployment.md#the-products-processes).
REAPER_LOCK = 0x5245_4150  # an arbitrary key of this app's advisory locks
SKIPPED_TICK = "reaper: the previous pass still runs; this tick is skipped"


def _start(run_id: int) -> None:
    """Start the run, unless it was deleted since the task was sent."""
    run = Run.objects.filter(pk=run_id).first()
    if run is not None:
        services.start_run(run)


# Idempotent: Run.mark_starting lets only one delivery start the run. A pool process killed mid-task
# puts the task back on the queue; a whole worker killed leaves it unacknowledged until the broker's
# visibility timeout, so the reaper finds the lost start itself (services.recover_lost_start).
@shared_task(name=LAUNCH_RUN_TASK, acks_late=True, reject_on_worker_lost=True)
def launch_run(run_id: int) -> None:
    _start(run_id)


@shared_task
def start_next(team_id: int) -> None:
    """A run of the team ended: start the held runs whose turn it is (docs/sweeps.md#limit)."""
    for run_id in services.next_in_line(team_id):
        _start(run_id)


@shared_task
def cancel_run(run_id: int) -> None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return
    services.stop_executor(run)


@shared_task
def reap_runs() -> None:
    """Periodic: reconcile every active run with its executor (those whose start was never recorded
    too: services.recover_lost_start); resend lost launches and start the held runs whose turn it is.
    Race: a pass longer than the beat's tick meets the next tick on another worker (or another pool
    process); two passes would judge the same runs and resend the same launches twice. The second
    finds the lock held and skips its tick."""
    with one_at_a_time(REAPER_LOCK) as mine:
        if not mine:
            logger.info(SKIPPED_TICK)
            return
        runs = list(Run.objects.filter(status__in=ACTIVE, executor__in=reaped_executors()))
        logger.info("reaper: a pass over %d active run(s)", len(runs))
        for run in runs:
            services.reconcile(run)
        for run_id in services.requeue_lost_launches():
            launch_run.delay(run_id)


@shared_task
def resend_lost_jobs() -> list[int]:
    """Periodic: jobs whose task was lost are sent again; those whose worker was lost fail."""
    from webapp.experiments.jobs import resend_lost_jobs as resend

    return resend()


@shared_task(name=DEMONSTRATIONS_TASK)
def demonstrations_task(job_id: int) -> None:
    """Generate demonstrations (docs/demonstrations.md); the job's claim makes a redelivery do nothing."""
    job = Job.objects.select_related("team", "user").filter(pk=job_id, kind=DEMONSTRATIONS_JOB).first()
    if job is None:
        return
    job.run_with(demonstrations.run)
