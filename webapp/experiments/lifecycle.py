"""A run's life: draft → queued → starting → running → succeeded | failed | cancelled, plus stalled
(no heartbeat or no progress within a limit). Every transition is one guarded UPDATE that must
change exactly one row; the race each guard prevents is written beside it.

RunLifecycle holds the fields a run's life moves and the transitions that move them; Run inherits
them, so each state change is still a Run method (``run.claim()``, ``run.finish()``).
"""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any, Self

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Greatest
from django.utils import timezone

from webapp.experiments.executors import WAITING_FOR_RESOURCES, outside_executors
from webapp.experiments.signals import run_finished
from webapp.guarded import guarded_update


class RunStatus(models.TextChoices):
    DRAFT = "draft"
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALLED = "stalled"


TERMINAL = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
ACTIVE = (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STALLED)
STARTED = (RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STALLED)  # a trainer process exists
CLAIMED = (RunStatus.RUNNING, RunStatus.STALLED)  # the statuses of a run its trainer owns
# What a user may resume from its newest checkpoint (docs/resume.md): a stalled run's trainer is killed first.
RESUMABLE = (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.STALLED)
# What reopen_for_resume clears: the last attempt's start, claim and cancel.
_NEW_ATTEMPT: dict[str, Any] = {
    "executor_ref": "",
    "node": "",  # the new attempt's executor places it anew (docs/ray.md#a-lost-node)
    "claimed_by": "",
    "claimant": "",
    "token_hash": "",
    "launch_attempts": 0,
    "starting_at": None,
    "heartbeat_at": None,
    "progress_at": None,
    "finished_at": None,
    "held_at": None,
    "cancel_requested": False,
    "cancel_requested_at": None,
    "cancelled_by": None,
    "cancel_reason": "",
}


class RunLifecycle(models.Model):
    """Where a run is in its life and who moves it on: the launcher, the trainer, the reaper, a user
    cancelling. Abstract: its fields are columns of Run's table."""

    status = models.CharField(
        max_length=12, choices=RunStatus.choices, default=RunStatus.DRAFT, db_index=True
    )
    executor = models.CharField(max_length=10, default="local")
    # Local: the process group id; Ray: the submission id. Set when the executor has started it.
    executor_ref = models.CharField(max_length=200, blank=True)
    node = models.CharField(
        max_length=200, blank=True, help_text="The Ray node the run's trainer ran on (name, address · id)."
    )
    cancel_requested = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    step = models.IntegerField(default=0)
    total_steps = models.IntegerField(default=0)
    message = models.TextField(blank=True, help_text="Last status message or the error that ended the run.")
    claimed_by = models.CharField(max_length=200, blank=True)
    # The launch's claimant id (trainer.contract.CLAIMANT_ENV), recorded by the claim: only calls that
    # carry it may change the run (docs/reliability.md#claimant).
    claimant = models.CharField(max_length=64, blank=True)
    launch_attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Starts tried, relaunches included."
    )
    starting_at = models.DateTimeField(null=True, blank=True, help_text="When the latest start began.")
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True, help_text="When the step counter last moved.")
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who asked for the cancel; the run's final message names them.",
    )
    cancel_reason = models.CharField(
        max_length=200,
        blank=True,
        help_text="Why the product cancelled it (a health check), when no user did.",
    )
    held_at = models.DateTimeField(
        null=True, blank=True, help_text="When the team's limit on active runs first kept it queued."
    )

    class Meta:
        abstract = True

    def _row(self) -> models.QuerySet[Self]:
        """This run's row, for an UPDATE."""
        return type(self)._default_manager.filter(pk=self.pk)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 0.0

    def _transition(self, allowed_from: tuple[str, ...], **changes: Any) -> bool:
        """The change from one of the ``allowed_from`` statuses; True when this call made it."""
        return guarded_update(self, Q(status__in=allowed_from), **changes)

    def freeze_config(self, config: dict[str, Any]) -> bool:
        """The RunConfig the run trains with, set while it is a draft (its seed and paths need its id)."""
        # Race: none between writers (one launch creates the run); the draft filter keeps a queued
        # run's config, which its trainer may already be reading, from changing under it.
        return self._transition((RunStatus.DRAFT,), config=config)

    def record_executor_ref(self, executor_ref: str) -> None:
        """Where the executor started the run (process group, Ray submission), for the reaper."""
        # Unguarded on purpose: a run cancelled while its process started still needs the ref, so
        # that the reaper can find and stop the process.
        self._row().update(executor_ref=executor_ref)
        self.executor_ref = executor_ref

    def record_node(self, node: str) -> None:
        """The node the executor placed the run on; a "waiting for resources" message is over then."""
        # Unguarded on purpose: where a run ran stays true whatever its status is now.
        self._row().update(node=node)
        self._row().filter(message__startswith=WAITING_FOR_RESOURCES).update(message="")
        self.refresh_from_db(fields=["node", "message"])

    def note_waiting(self, message: str) -> bool:
        """What a started run's executor still waits for (a Ray job queued for resources)."""
        # Race: the trainer claiming meanwhile: only a run still starting takes the message.
        return self.message != message and self._transition((RunStatus.STARTING,), message=message)

    def enqueue(self) -> bool:
        # Race: a double-clicked "launch" would enqueue twice; only the first draft → queued wins.
        return self._transition((RunStatus.DRAFT,), status=RunStatus.QUEUED, queued_at=timezone.now())

    def hold(self) -> bool:
        """The team's limit keeps the queued run waiting (docs/sweeps.md#limit): the reaper starts it
        as soon as it is first in line and a place is free."""
        # Race: none worth a guard beyond the status: a run started or cancelled meanwhile is no
        # longer held, and holding it twice keeps the first time.
        return guarded_update(self, Q(status=RunStatus.QUEUED, held_at__isnull=True), held_at=timezone.now())

    def mark_starting(self, executor_ref: str) -> bool:
        # Race: a retried launch task must not start a second process for a run already started.
        return self._transition(
            (RunStatus.QUEUED,),
            status=RunStatus.STARTING,
            executor_ref=executor_ref,
            starting_at=timezone.now(),
            launch_attempts=F("launch_attempts") + 1,
        )

    def requeue_lost_start(self) -> bool:
        """starting → queued again: the start left no trace (its launching worker died before the
        executor had the run), so a new launch task may start it (docs/reliability.md#lost-launch)."""
        # Race: a trainer of the "lost" start claiming now: the empty claimant in the same UPDATE
        # keeps a claimed run its trainer's. Should that start still come to life later, its
        # trainer and the new start's race to claim, and the claimant lets only one of them train.
        lost = self._row().filter(status=RunStatus.STARTING, claimant="", cancel_requested=False)
        changed = lost.update(status=RunStatus.QUEUED, queued_at=timezone.now(), executor_ref="")
        self.refresh_from_db()
        return changed == 1

    def claim(self, worker: str, claimant: str) -> bool:
        """The one way a run becomes a trainer's: True when the launch ``claimant`` owns it now."""
        # Race: two trainer processes for one run (a retried submit); only one may own it. A run
        # stalled before any process claimed it (a Ray job pending for resources) may still be.
        now = timezone.now()
        never_claimed = Q(status=RunStatus.STALLED, claimant="")
        claimable = Q(status__in=(RunStatus.QUEUED, RunStatus.STARTING)) | never_claimed
        changed = guarded_update(
            self,
            claimable,
            status=RunStatus.RUNNING,
            claimed_by=worker,
            claimant=claimant,
            started_at=now,
            heartbeat_at=now,
            progress_at=now,
        )
        # A claim retried by its own process (the first answer was lost) finds the run already its
        # own: yes again, and nothing changes; any other claimant is refused.
        return changed or (self.is_claimant(claimant) and self.status in CLAIMED)

    def take_external(self, worker: str, claimant: str) -> bool:
        """An external run's logging process (the SDK's, docs/sdk.md#resume) takes it: ``claimant``
        owns it from now on. Only a live external run: an ended one takes no writes."""
        # Race: two processes resuming one run at once: the later UPDATE's claimant owns it, and the
        # other's reports are refused (409) from then on, as for a launched run's second trainer.
        now = timezone.now()
        live = Q(executor__in=outside_executors()) & ~Q(status__in=TERMINAL)
        return guarded_update(
            self, live, status=RunStatus.RUNNING, claimed_by=worker, claimant=claimant, heartbeat_at=now
        )

    def is_claimant(self, claimant: str) -> bool:
        """Whether ``claimant`` is the id the run was claimed with (none before the claim)."""
        return bool(self.claimant) and hmac.compare_digest(self.claimant, claimant)

    def report(self, status: str, message: str = "") -> bool:
        """A status the trainer reports; True when it changed the run. A terminal status finishes the
        run; ``starting`` and ``running`` only keep the message: no report claims a run (see claim)."""
        if status in TERMINAL:
            return self.finish(status, message)
        if not message:
            return False
        # Race: a message arriving after the run ended must not replace the one that ended it; a
        # "running" one is for a claimed run only.
        return self._transition(CLAIMED if status == RunStatus.RUNNING else ACTIVE, message=message)

    def heartbeat(self, step: int | None = None, total_steps: int | None = None) -> bool:
        # After a terminal state a heartbeat changes nothing; a stalled run is revived only by
        # progress (see _revive_if_progressing).
        now = timezone.now()
        changes: dict[str, Any] = {"heartbeat_at": now}
        if total_steps is not None:
            changes["total_steps"] = total_steps
        updated = self._row().filter(status__in=CLAIMED)
        if step is not None:
            updated.filter(step__lt=step).update(progress_at=now)
            # Forward only: the step's metrics arrive (note_progress) before the trainer's beat that
            # ends it, and a beat resent meanwhile still carries the step before.
            changes["step"] = Greatest("step", Value(step))
        changed = updated.update(**changes)
        self._revive_if_progressing()
        self.refresh_from_db()
        return changed == 1

    def note_progress(self, step: int | None = None) -> None:
        """Work arrived for the run (trajectories, metrics through MLflow): progress, even for a
        trainer like verl that has no step counter of ours to move; ``step`` moves it forward only."""
        now = timezone.now()
        # Progress revives a stalled run (see _revive_if_progressing), in the same UPDATE: one round
        # trip per batch on the ingestion hot path.
        stalled = Q(status=RunStatus.STALLED)
        changes: dict[str, Any] = {
            "heartbeat_at": now,
            "progress_at": now,
            "status": Case(
                When(stalled, then=Value(RunStatus.RUNNING)),
                default=F("status"),
                output_field=models.CharField(),
            ),
            "message": Case(
                When(stalled, then=Value("")), default=F("message"), output_field=models.TextField()
            ),
        }
        if step is not None:
            changes["step"] = Greatest("step", Value(step))
        # An external run's state is its client's: its counter follows what it logs in any status.
        moving = Q(status__in=CLAIMED) | Q(executor__in=outside_executors())
        self._row().filter(moving).update(**changes)

    def _revive_if_progressing(self) -> None:
        # Race: a late heartbeat after the reaper marked the run stalled. It revives the run only if
        # the run progressed within the limit: a process that beats while waiting (verl's driver
        # while verl waits for GPUs) must not mask a no-progress stall. The stall's message goes
        # with the stall: it is no longer true.
        cutoff = timezone.now() - timedelta(seconds=settings.STALL_AFTER_S)
        self._row().filter(status=RunStatus.STALLED, progress_at__gte=cutoff).update(
            status=RunStatus.RUNNING, message=""
        )

    def finish(self, status: str, message: str = "") -> bool:
        if status not in TERMINAL:
            raise ValueError(f"finish() takes a terminal status ({', '.join(TERMINAL)}), not {status!r}")
        if status == RunStatus.CANCELLED:
            message = self._cancel_message(message)
        # Race: the trainer's own "succeeded" and the reaper's "failed" can arrive together; the
        # first terminal state wins and later ones change nothing.
        changes: dict[str, Any] = {"status": status, "message": message, "finished_at": timezone.now()}
        if status == RunStatus.SUCCEEDED:
            # A run that succeeded did all its steps, whether or not its last heartbeat arrived first.
            changes["step"] = Greatest("step", "total_steps")
        if not self._transition(ACTIVE, **changes):
            return False
        run_finished.send(sender=type(self), run=self)
        return True

    def reopen_external(self) -> bool:
        """An ended external run running again, so its MLflow client may log to it once more: only
        an administrator's explicit, logged action does this (the Run admin's), never a client: an
        ended run takes no writes (docs/mlflow.md#access). True when this call reopened it."""
        # Race: two administrators at once; the second finds it running and changes nothing.
        ended = Q(status__in=TERMINAL, executor__in=outside_executors())
        return guarded_update(self, ended, status=RunStatus.RUNNING, finished_at=None, message="")

    def _cancel_message(self, message: str) -> str:
        """A run someone cancelled ends with "cancelled by <user>", whatever the trainer or the
        executor said about how the process went away (SIGTERM, a vanished process group)."""
        requested = self._row().filter(cancel_requested=True)
        username, reason = requested.values_list("cancelled_by__username", "cancel_reason").first() or (
            None,
            "",
        )
        return f"cancelled by {username}" if username else reason or message

    def request_cancel(self, by: Any = None, reason: str = "") -> bool:
        """Ask for cancellation on behalf of the user ``by`` (or for ``reason``, when the product asks);
        a run that never started is cancelled at once."""
        # Race: cancelling a draft/queued run while the launcher picks it up; the launcher's
        # mark_starting then finds it cancelled and does nothing.
        now = timezone.now()
        who = by if by is not None and by.is_authenticated else None
        message = (
            f"cancelled by {who.username} before it started"
            if who
            else reason or "cancelled before it started"
        )
        asked = dict(
            cancel_requested=True, cancel_requested_at=now, cancelled_by=who, cancel_reason=reason[:200]
        )
        ended = dict(status=RunStatus.CANCELLED, finished_at=now, message=message)
        if self._transition((RunStatus.DRAFT, RunStatus.QUEUED), **asked, **ended):
            return True
        # Race: a second cancel (another user, a double click) must not change who cancelled or
        # restart the grace period; the request already stands.
        self._row().filter(status__in=ACTIVE, cancel_requested=False).update(**asked)
        self.refresh_from_db()
        return self.status in ACTIVE and self.cancel_requested

    def reopen_for_resume(self, step: int) -> bool:
        """failed, cancelled or stalled → queued, to continue from its checkpoint of ``step`` as a new
        attempt (docs/resume.md): what the last attempt's start and cancel left on the row goes, so the
        launch starts it as it would a new run; the new start issues a new token and claimant."""
        # Race: two resumes at once (a double click, the page and the REST API) and a late "failed"
        # from the reaper: the status filter lets one of them change the row.
        message = f"resumed from its checkpoint of step {step}"
        queued = dict(status=RunStatus.QUEUED, queued_at=timezone.now(), step=step, message=message)
        return self._transition(RESUMABLE, **queued, **_NEW_ATTEMPT)

    def mark_stalled(self, message: str, silent_for_s: float) -> bool:
        # Race: a heartbeat landing between the reaper's read and this write; the same UPDATE
        # re-checks that the run is still silent.
        return guarded_update(self, _silent_filter(silent_for_s), status=RunStatus.STALLED, message=message)

    def fail_if_silent(self, message: str, silent_for_s: float) -> bool:
        """Fail a claimed run silent for ``silent_for_s`` (a hung trainer); True when this call did."""
        # Race: a heartbeat or progress landing between the reaper's read and this write; the
        # same UPDATE re-checks the silence, and the first terminal state still wins. A run stalled
        # before any trainer claimed it (a Ray job pending for resources) has no trainer to be hung.
        claimed = Q(status__in=CLAIMED) & ~Q(claimant="")
        return guarded_update(
            self,
            claimed & _silence(silent_for_s),
            status=RunStatus.FAILED,
            message=message,
            finished_at=timezone.now(),
        )

    @classmethod
    def silent_since(cls, seconds: float) -> models.QuerySet[Self]:
        """Running runs without a heartbeat, or without progress, for ``seconds``; starting runs
        that no trainer claimed within ``seconds`` of being queued."""
        return cls._default_manager.filter(_silent_filter(seconds))


def _silence(seconds: float) -> Q:
    """No heartbeat, or no progress, for ``seconds``."""
    cutoff = timezone.now() - timedelta(seconds=seconds)
    return Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True) | Q(progress_at__lt=cutoff)


def _silent_filter(seconds: float) -> Q:
    cutoff = timezone.now() - timedelta(seconds=seconds)
    # A run whose trainer never claimed it (a Ray job PENDING for want of resources) is stuck too.
    never_claimed = Q(status=RunStatus.STARTING, starting_at__lt=cutoff)
    return (Q(status=RunStatus.RUNNING) & _silence(seconds)) | never_claimed


class RunAttempt(models.Model):
    """One attempt of a run: its first start, or a resume from a checkpoint (docs/resume.md#attempts).
    A run never resumed has no rows; its first resume records the attempt that ended and opens the
    next one, which the run's end closes (``close_attempt``)."""

    run = models.ForeignKey("experiments.Run", on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveSmallIntegerField(help_text="1 for the first start, then one per resume.")
    resumed_from_step = models.IntegerField(
        null=True, blank=True, help_text="The checkpoint's step it continued from; none for the first."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_status = models.CharField(max_length=12, choices=RunStatus.choices, blank=True)
    end_message = models.TextField(blank=True, help_text="Why it ended: the run's message then.")
    resumed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["run_id", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="one_attempt_number_per_run")]

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.run_id}"


def close_attempt(sender: type, run: Any, **kwargs: Any) -> None:
    """The receiver of run_finished: the run's open attempt ends with it (status, message, time)."""
    # Race: none; run_finished is sent once, by the transition that ended the run.
    RunAttempt.objects.filter(run_id=run.pk, ended_at__isnull=True).update(
        ended_at=run.finished_at or timezone.now(), end_status=run.status, end_message=run.message
    )
