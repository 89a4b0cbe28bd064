"""An experiment's keep-policy applied as each checkpoint of its runs arrives
(docs/checkpoints.md#keep-policies): the checkpoints it no longer keeps are marked deleted, with the
policy in words, and their folders removed once that is committed.

Never deleted whatever the policy says: a run's newest checkpoint (the policy keeps it), one a member
tagged on the registry page, and one an active run is starting from (a fork still queued).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from django.db import transaction

from webapp.experiments.models import ACTIVE, Run
from webapp.experiments.run_files import checkpoint_folder
from webapp.ingestion.models import POLICY_DELETED, Checkpoint
from webapp.retention.checkpoint_policy import KeepPolicy

logger = logging.getLogger(__name__)


def apply_keep_policy(run: Run) -> list[int]:
    """Delete what the run's experiment's policy no longer keeps; the steps deleted."""
    policy = KeepPolicy.of_experiment(run.experiment_id)
    if policy is None or not policy.active:
        return []
    saved = list(Checkpoint.objects.filter(run=run, deleted=False).order_by("step"))
    kept = policy.kept([(checkpoint.step, checkpoint.metrics) for checkpoint in saved])
    kept.update(_started_from(run))
    doomed = [c for c in saved if c.step not in kept and not c.tags]
    if not doomed:
        return []
    folders = [folder for folder in map(checkpoint_folder, doomed) if folder is not None]
    Checkpoint.objects.filter(pk__in=[c.pk for c in doomed]).update(
        deleted=True, deleted_by=f"{POLICY_DELETED} ({policy.describe()})"
    )
    transaction.on_commit(lambda: _remove(folders))
    return [c.step for c in doomed]


def _started_from(run: Run) -> set[int]:
    """Steps of the run that a run not yet ended starts from: its weights must still be there."""
    starting = Run.objects.filter(started_from=run, status__in=ACTIVE)
    steps = starting.values_list("started_from_step", flat=True)
    return {step for step in steps if step is not None}


def _remove(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
        logger.info("checkpoint deleted by its experiment's keep-policy: %s", folder)
