from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.results import alerts
from webapp.results.models import AlertDelivery

# Tries of an alert delivery after its first: up to 5 s, 10 s, 20 s ... apart (Celery's jittered
# backoff), the wait capped at 10 minutes: at most about 20 minutes for a mail server or webhook to return.
ALERT_RETRIES = 8


# Not acks_late: a try is claimed on the delivery row (AlertDelivery.start_try), so a redelivered task
# never sends twice; a worker killed mid-try leaves that delivery "sending", on the run page.
@shared_task(
    bind=True,
    autoretry_for=(alerts.DeliveryFailed,),
    retry_backoff=5,
    retry_backoff_max=600,
    max_retries=ALERT_RETRIES,
)
def send_alert(self: Any, delivery_id: int) -> None:
    delivery = AlertDelivery.objects.select_related("alert__run__team").filter(pk=delivery_id).first()
    if delivery is None:
        return
    alerts.send(delivery, last_try=self.request.retries >= ALERT_RETRIES)


# Idempotent: a second run finds nothing more to drop (storage.apply_retention).
@shared_task(acks_late=True, reject_on_worker_lost=True)
def apply_retention_task(run_id: int) -> None:
    from webapp.results import storage

    storage.apply_retention(run_id)


# Idempotent: what is unreferenced once is deleted once (storage.sweep_texts).
@shared_task(acks_late=True, reject_on_worker_lost=True)
def sweep_texts_task() -> None:
    from webapp.results import storage

    storage.sweep_texts()
    storage.vacuum()


@shared_task
def import_run_task(job_id: int) -> None:
    """A run import (docs/imports.md#as-a-job); the job's claim makes a redelivery do nothing."""
    from webapp.experiments.jobs import Job
    from webapp.results.import_jobs import IMPORT_JOB, run_import

    job = Job.objects.select_related("team", "user").filter(pk=job_id, kind=IMPORT_JOB).first()
    if job is None:
        return
    job.run_with(run_import)


@shared_task
def store_token_signals_task(job_id: int) -> None:
    """A large token-signals body (docs/api.md#jobs); the job's claim makes a redelivery do nothing."""
    from webapp.experiments.jobs import Job
    from webapp.results.ingest import SIGNALS_JOB, store_signals_job

    job = Job.objects.select_related("run").filter(pk=job_id, kind=SIGNALS_JOB).first()
    if job is None:
        return
    job.run_with(store_signals_job)
