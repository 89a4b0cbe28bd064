"""The playground's Celery task: the job's claim makes a redelivery do nothing (docs/playground.md)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from webapp.experiments.jobs import Job
from webapp.playground import services

# Two answers of at most PLAYGROUND_TIME_S each, plus loading their models: past this the worker
# stops the task whatever it is doing (a tool call that hangs), and the job fails.
HARD_LIMIT_S = 2 * settings.PLAYGROUND_TIME_S + 300


@shared_task(name=services.PLAYGROUND_TASK, soft_time_limit=HARD_LIMIT_S, time_limit=HARD_LIMIT_S + 30)
def playground_task(job_id: int) -> None:
    job = Job.objects.select_related("team", "user").filter(pk=job_id, kind=services.PLAYGROUND_JOB).first()
    if job is None:
        return
    job.run_with(services.work)
