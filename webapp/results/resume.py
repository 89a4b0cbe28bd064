"""Resume a run that ended before its last step (docs/resume.md): the same run continues from its
newest complete checkpoint as a new attempt. What its earlier attempt stored after that checkpoint's
step is superseded (webapp.ingestion.supersede) in the transaction that reopens the run, and the
launch task starts it again; its trainer finds the checkpoint in the run's own checkpoint folder
(trainer.resume), the torch backend's ``step_N`` or verl's ``global_step_N``.

It lives in results, above ingestion and experiments, because it changes both in one transaction
(docs/architecture.md#layers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from trainer.backends import BACKENDS
from trainer.config import RunConfig
from webapp.celery import enqueue_on_commit
from webapp.experiments.executors import executor_of
from webapp.experiments.lifecycle import RESUMABLE, RunAttempt
from webapp.experiments.models import ACTIVE, LAUNCH_RUN_TASK, Run, RunStatus
from webapp.ingestion.supersede import Superseded, supersede_after
from webapp.monitoring import health

logger = logging.getLogger(__name__)


class ResumeRefused(ValueError):
    """The run cannot be resumed now; ``why`` says why and what to do instead, the message adds which run."""

    def __init__(self, run: Run, why: str) -> None:
        super().__init__(f"run {run.pk} cannot be resumed: {why}")
        self.why = why


@dataclass(frozen=True)
class Resumed:
    step: int  # the checkpoint's step it continues from
    attempt: int  # the number of the attempt that starts now
    superseded: Superseded


def resume_step(run: Run) -> int:
    """The step of the checkpoint the run would continue from; ResumeRefused saying why it cannot."""
    why = _status_refusal(run)
    if why:
        raise ResumeRefused(run, why)
    try:
        config = RunConfig.model_validate(run.config)
    except ValueError as exc:
        raise ResumeRefused(run, f"its stored configuration no longer validates ({exc})") from None
    point = BACKENDS.get(config.backend).resume_point(config)
    if point.step is None:
        raise ResumeRefused(run, point.refusal)
    return point.step


def _status_refusal(run: Run) -> str:
    if run.is_external:
        return "it was reported from outside (an MLflow client, an import): no trainer of ours runs it"
    if run.is_evaluation:
        return "an evaluation is not resumed: evaluate the checkpoint again"
    if run.status in ACTIVE and run.status not in RESUMABLE:
        return f"it is still {run.status}: only a failed, cancelled or stalled run can be resumed"
    if run.status not in RESUMABLE:
        return f"it is {run.status}: only a failed, cancelled or stalled run can be resumed"
    return ""


def resume(run: Run, user: Any) -> Resumed:
    """Continue the failed, cancelled or stalled ``run`` from its newest resumable checkpoint (a stalled
    one's trainer is killed first); ResumeRefused with the reason when it cannot."""
    step = resume_step(run)
    if run.status == RunStatus.STALLED:
        _kill(run)
        step = resume_step(run)  # it may have completed a newer checkpoint before it died
    with transaction.atomic():
        # Race: two resumes at once; the row lock makes the second see the first's queued run and refuse.
        Run.objects.select_for_update().filter(pk=run.pk).first()
        run.refresh_from_db()
        why = _status_refusal(run)
        if why:
            raise ResumeRefused(run, why)
        attempt = _record_attempts(run, step, user)
        superseded = supersede_after(run.pk, step)
        health.rewind(run.pk, step)
        if not run.reopen_for_resume(step):  # the row lock holds: only a bug gets here
            raise ResumeRefused(run, f"it is {run.status}")
        enqueue_on_commit(LAUNCH_RUN_TASK, run.pk)
    logger.info("run %s resumed from step %s as attempt %s", run.pk, step, attempt)
    return Resumed(step=step, attempt=attempt, superseded=superseded)


def _kill(run: Run) -> None:
    """A stalled run's trainer may still be alive: it is killed (SIGKILL, as the watchdog does) so that
    two trainers never write the same checkpoint folder."""
    try:
        executor_of(run).stop(run, force=True)
    except Exception as exc:  # a process already gone is what we want
        logger.warning("could not stop stalled run %s before resuming it: %s", run.pk, exc)


def _record_attempts(run: Run, step: int, user: Any) -> int:
    """Close the attempt that ended (the first one is recorded now, from the run's row) and open the
    next; the number of the new one."""
    ended = {
        "ended_at": run.finished_at or timezone.now(),
        "end_status": run.status,
        "end_message": run.message,
    }
    last = run.attempts.aggregate(last=Max("number"))["last"]
    if last is None:
        RunAttempt.objects.create(run=run, number=1, started_at=run.started_at or run.queued_at, **ended)
        last = 1
    else:
        run.attempts.filter(number=last, ended_at__isnull=True).update(**ended)
    who = user if user is not None and user.is_authenticated else None
    RunAttempt.objects.create(
        run=run, number=last + 1, resumed_from_step=step, started_at=timezone.now(), resumed_by=who
    )
    return last + 1


def resume_markers(run: Run) -> list[int]:
    """The steps the run was resumed from, for its curves."""
    steps = run.attempts.values_list("resumed_from_step", flat=True)
    return [step for step in steps if step is not None]
