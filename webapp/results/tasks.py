from __future__ import annotations

from celery import shared_task

from webapp.experiments.jobs import Job
from webapp.results import model_export
from webapp.results.import_jobs import IMPORT_JOB, IMPORT_TASK, run_import
from webapp.results.model_export import EXPORT_JOB, EXPORT_TASK


@shared_task(name=IMPORT_TASK)
def import_run_task(job_id: int) -> None:
    """A run import (docs/imports.md#as-a-job); the job's claim makes a redelivery do nothing."""
    job = Job.objects.select_related("team", "user").filter(pk=job_id, kind=IMPORT_JOB).first()
    if job is None:
        return
    job.run_with(run_import)


@shared_task(name=EXPORT_TASK)
def export_task(job_id: int) -> None:
    """A checkpoint export (docs/checkpoints.md#export); the job's claim makes a redelivery do nothing."""
    job = Job.objects.select_related("team", "user", "run").filter(pk=job_id, kind=EXPORT_JOB).first()
    if job is None:
        return
    job.run_with(model_export.work)
