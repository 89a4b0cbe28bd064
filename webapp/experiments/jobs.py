"""Long work a request hands to a Celery worker (docs/api.md#jobs): the request answers at once with
the job, which anyone allowed to see it polls for its progress and outcome.

A Job is one row: what kind of work, for whom, its status (queued → running → done | failed), its
progress (a phase and ``done`` of ``total``), and its outcome (``result``, or ``message`` when it
failed). Its files (an upload, a large body) wait in a folder of their own on the shared disk and go
with the job's end. Each kind's Celery task calls :meth:`Job.run_with` with its own work function;
the work raises JobRefused for input it cannot take (the message is the user's to read).

Each kind of work is one :class:`JobKind`: its name, its Celery task, and how many of its jobs may be
active at once per member or per run. :meth:`Job.start` answers TooManyJobs past that limit, under a
lock, so two requests at once cannot both slip by.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module
from pathlib import Path
from typing import Any, Literal

from celery import current_app
from django.conf import settings
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.guarded import guarded_update

logger = logging.getLogger(__name__)

# A job still queued this long after it was made lost its task (a flushed broker): it is sent again.
RESEND_QUEUED_AFTER = timedelta(minutes=10)
# A job running this long lost its worker (killed mid-task): it failed, and no longer counts
# against its member's limit.
LOST_RUNNING_AFTER = timedelta(hours=2)


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


ACTIVE_JOB = (JobStatus.QUEUED, JobStatus.RUNNING)


class JobRefused(ValueError):
    """Input the job's work cannot take; its message is shown as the job's outcome."""


class TooManyJobs(Exception):
    """A new job past its caller's limit of active ones: answered 429 with the reason."""


@dataclass(frozen=True)
class JobKind:
    """One kind of long work: ``name`` is stored as Job.kind, ``task`` is the Celery task that does it,
    and at most ``most`` of its jobs (a number, or the name of the setting that holds it) may be queued
    or running at once for one ``per`` (member or run)."""

    name: str
    task: str
    most: int | str
    per: Literal["user", "run"] = "user"

    def limit(self, fields: dict[str, Any]) -> tuple[Q, int]:
        """(which jobs count against the limit, how many may be active) for a job of these fields."""
        most = getattr(settings, self.most) if isinstance(self.most, str) else self.most
        counted: dict[str, Any] = {self.per: fields[self.per]}
        return Q(**counted), most


class Job(models.Model):
    kind = models.CharField(max_length=30)
    task = models.CharField(max_length=200, help_text="The Celery task that does the work.")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="jobs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    run = models.ForeignKey(
        "experiments.Run",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="jobs",
        help_text="The run the work made (an import) or works on (token signals).",
    )
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    phase = models.CharField(max_length=200, blank=True, help_text="What the work is doing now.")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    options = models.JSONField(default=dict, help_text="What the request asked for.")
    result = models.JSONField(default=dict, help_text="What the work produced (counts, ids).")
    message = models.TextField(blank=True, help_text="Why it failed.")
    created = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["user", "kind"], condition=Q(status__in=ACTIVE_JOB), name="active_jobs")
        ]

    def __str__(self) -> str:
        return f"{self.kind} job {self.pk} ({self.status})"

    @classmethod
    def start(cls, kind: JobKind, team: Team, **fields: Any) -> Job:
        """A queued job of that kind, sent by :meth:`enqueue` once its files are in place.
        TooManyJobs when the kind's limit for the job's member (or run) is reached."""
        counted, most = kind.limit(fields)
        with transaction.atomic():
            # Race: two requests of one member (or run) at once, each finding one place left. The
            # team's row lock makes the second count after the first has made its job.
            Team.objects.select_for_update().filter(pk=team.pk).first()
            active = cls.active().filter(counted, kind=kind.name)
            if active.count() >= most:
                ids = ", ".join(str(pk) for pk in active.values_list("pk", flat=True))
                raise TooManyJobs(
                    f"{most} {kind.name} jobs are running or queued already ({ids}): wait for one"
                )
            return cls.objects.create(kind=kind.name, task=kind.task, team=team, **fields)

    def enqueue(self) -> None:
        """Send the job to its task once the caller's transaction (if any) commits."""
        transaction.on_commit(lambda: _task(self.task).delay(self.pk))

    def abandon(self, why: str) -> None:
        """A job whose request failed before its work could be sent (its files not saved)."""
        Job.objects.filter(pk=self.pk, status=JobStatus.QUEUED).update(
            status=JobStatus.FAILED, finished_at=timezone.now(), message=why
        )
        shutil.rmtree(self.folder, ignore_errors=True)

    @classmethod
    def active(cls) -> models.QuerySet[Job]:
        """Jobs queued or running, less the running ones whose worker was lost long ago."""
        lost = Q(status=JobStatus.RUNNING, started_at__lt=timezone.now() - LOST_RUNNING_AFTER)
        return cls.objects.filter(status__in=ACTIVE_JOB).exclude(lost)

    @property
    def folder(self) -> Path:
        """Where the job's files wait for its worker (the shared disk uploads stream to)."""
        from webapp.datasets.files import incoming_dir

        return incoming_dir() / f"job-{self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in (JobStatus.DONE, JobStatus.FAILED)

    def run_with(self, work: Callable[[Job], dict[str, Any]]) -> None:
        """Do ``work`` once (a redelivered task finds the job claimed), recording its outcome."""
        # Race: the task delivered twice (a redelivery, a resend of a job thought lost); one claims.
        if not guarded_update(
            self, Q(status=JobStatus.QUEUED), status=JobStatus.RUNNING, started_at=timezone.now()
        ):
            return
        try:
            result = work(self)
        except JobRefused as refused:
            self._end(JobStatus.FAILED, message=str(refused))
        except Exception:
            logger.exception("%s failed", self)
            self._end(JobStatus.FAILED, message="the server failed on this job; it is logged")
        else:
            self._end(JobStatus.DONE, result=result)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def progress(self, phase: str, done: int = 0, total: int = 0) -> None:
        """What the work is doing now, for the pollers (committed at once, outside the work's own
        transactions)."""
        # Race: none: only the worker that claimed the job writes its progress.
        Job.objects.filter(pk=self.pk).update(phase=phase[:200], done=done, total=total)
        self.phase, self.done, self.total = phase[:200], done, total

    def _end(self, status: str, **changes: Any) -> None:
        Job.objects.filter(pk=self.pk, status=JobStatus.RUNNING).update(
            status=status, finished_at=timezone.now(), phase="", **changes
        )
        self.refresh_from_db()


def resend_lost_jobs() -> list[int]:
    """Jobs queued long ago are sent to their task again; jobs running far too long fail."""
    now = timezone.now()
    Job.objects.filter(status=JobStatus.RUNNING, started_at__lt=now - LOST_RUNNING_AFTER).update(
        status=JobStatus.FAILED, finished_at=now, message="its worker was lost; start it again"
    )
    queued = list(
        Job.objects.filter(status=JobStatus.QUEUED, created__lt=now - RESEND_QUEUED_AFTER).values_list(
            "pk", "task"
        )
    )
    for pk, task in queued:
        _task(task).delay(pk)
    return [pk for pk, _task in queued]


def _task(name: str) -> Any:
    """The Celery task of that name: its module imported first (a web process does not autodiscover
    the apps' tasks as a worker does)."""
    import_module(name.rsplit(".", 1)[0])
    return current_app.tasks[name]
