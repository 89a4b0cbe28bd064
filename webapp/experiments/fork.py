"""A fork: a new experiment from any checkpoint of any run, with anything changed (docs/checkpoints.md#fork).

The fork's config is the run's experiment's config with ``start_from`` naming the run and the step,
and the user's changes over it; its one seed is the run's. Everything else is the ordinary path of a
config: ``accept`` resolves the checkpoint (webapp.experiments.start_from) and checks a kept optimiser
state, ``Experiment.create`` stores it, and its runs record the lineage (``Run.started_from``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.config import flatten_paths
from webapp.experiments.acceptance import MAX_NAME_LENGTH
from webapp.experiments.models import Run

# Set by the server when a config is accepted or launched: a fork never inherits its parent's.
SERVER_PATHS = ("start_from.checkpoint", "trainer.checkpoint_dir")


def fork_name(run: Run, step: int | None) -> str:
    at = f"step {step}" if step is not None else "its latest checkpoint"
    return f"{run.experiment.name} · fork of run {run.pk} at {at}"[:MAX_NAME_LENGTH]


def fork_mapping(run: Run, step: int | None, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config (by dotted path) of a fork of ``run``'s checkpoint of ``step`` (None: its latest),
    with ``changes`` over it; a fresh optimiser unless the changes keep the checkpoint's."""
    mapping = flatten_paths(run.experiment.config)
    for path in SERVER_PATHS:
        mapping.pop(path, None)
    mapping.update(
        {
            "start_from.run": run.pk,
            "start_from.step": step,
            "start_from.optimizer": False,
            "trainer.seed": run.seed,
            "name": fork_name(run, step),
        }
    )
    mapping.update(flatten_paths(changes or {}))
    return mapping
