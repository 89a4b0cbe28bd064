from __future__ import annotations

from celery import shared_task

from webapp.experiments import services
from webapp.experiments.models import ACTIVE, Run


@shared_task(acks_late=True)  # idempotent: Run.mark_starting lets only one delivery start the run
def launch_run(run_id: int) -> None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return
    services.start_run(run)


@shared_task
def cancel_run(run_id: int) -> None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return
    services.stop_executor(run)


@shared_task
def reap_runs() -> None:
    """Periodic: reconcile every active run with its executor; resend lost launches."""
    for run in Run.objects.filter(status__in=ACTIVE).exclude(executor_ref=""):
        services.reconcile(run)
    for run_id in services.requeue_lost_launches():
        launch_run.delay(run_id)
