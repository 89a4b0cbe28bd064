"""The ingestion app's tasks, and what queues them: a retention change applied to the stored data,
and the sweep of texts a deleted run leaves unreferenced."""

from __future__ import annotations

from celery import shared_task
from django.db import connection, transaction

from webapp.experiments.models import Run
from webapp.ingestion import storage
from webapp.retention.accounting import set_policy
from webapp.retention.models import RunStorage
from webapp.retention.policy import Retention


# Idempotent: a second run finds nothing more to drop (storage.apply_retention).
@shared_task(acks_late=True, reject_on_worker_lost=True)
def apply_retention_task(run_id: int) -> None:
    storage.apply_retention(run_id)


# Idempotent: what is unreferenced once is deleted once (storage.sweep_texts).
@shared_task(acks_late=True, reject_on_worker_lost=True)
def sweep_texts_task() -> None:
    storage.sweep_texts()
    storage.vacuum()


@transaction.atomic
def change_retention(run: Run, retention: Retention) -> RunStorage:
    """Set the run's policy; what it drops of the stored data goes once the transaction commits."""
    changed = set_policy(run, retention)
    apply_retention_task.delay_on_commit(run.pk)
    return changed


def runs_deleted(**_signal: object) -> None:
    """post_delete of a Run (also a cascade from its experiment or team): the texts only its steps
    referred to are swept once the delete commits, once per transaction however many runs went."""
    if not any(entry[1] is _queue_sweep for entry in connection.run_on_commit):
        transaction.on_commit(_queue_sweep)


def _queue_sweep() -> None:
    sweep_texts_task.delay()


@shared_task
def store_token_signals_task(job_id: int) -> None:
    """A large token-signals body (docs/api.md#jobs); the job's claim makes a redelivery do nothing."""
    from webapp.experiments.jobs import Job
    from webapp.ingestion.api import SIGNALS_JOB, store_signals_job

    job = Job.objects.select_related("run").filter(pk=job_id, kind=SIGNALS_JOB).first()
    if job is None:
        return
    job.run_with(store_signals_job)


@shared_task
def give_up_waiting_signals_task() -> int:
    """Periodic: token signals whose trajectory never came are given up (docs/rollouts.md#token-signals)."""
    from webapp.ingestion.token_signals import give_up_waiting_signals

    return give_up_waiting_signals()
