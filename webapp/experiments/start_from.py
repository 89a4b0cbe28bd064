"""Where a run's weights start: another run's checkpoint, e.g. an SFT run's (docs/sft.md#start-from).

A config names the run and, optionally, the step (``start_from.run``, ``start_from.step``); the
acceptance of a config (docs/architecture.md#how-a-config-is-accepted) resolves them here to the
checkpoint's folder (``start_from.checkpoint``, which only the server sets) and to the step it took,
and refuses what could not start: a run that is not the team's, one that trained another model, a
step never saved, deleted, or whose weights are no longer on disk. A fork that keeps the optimiser
state (``start_from.optimizer``, docs/checkpoints.md#fork) is refused when the checkpoint holds none or
when this config trains another way than its run did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.apps import apps

from trainer.config import RunConfig, flatten_paths
from trainer.contract import OPTIMIZER_FILE, POLICY_FOLDER
from webapp.experiments.run_files import checkpoint_folder

if TYPE_CHECKING:
    from webapp.accounts.models import Team

Problem = tuple[str, str]


class StartRefused(ValueError):
    def __init__(self, path: str, message: str) -> None:
        self.problem = (path, message)
        super().__init__(message)


def with_start_checkpoint(team: Team, config: RunConfig) -> RunConfig:
    """``config`` with start_from.checkpoint and start_from.step resolved from start_from.run (and
    the step asked for, else the latest checkpoint); StartRefused naming the field to change."""
    start = config.start_from
    if start.run is None:
        return config
    # The Run model by name: this module is imported by the acceptance, which models.py calls.
    source = apps.get_model("experiments", "Run").objects.filter(team=team, pk=start.run).first()
    if source is None:
        raise StartRefused("start_from.run", f"run {start.run} is not a run of this team")
    _check_same_model(source, config)
    step, folder = _checkpoint_of(source, start.step)
    if start.optimizer:
        _check_optimizer(source, config, step, folder)
    return config.with_overrides(**{"start_from.step": step, "start_from.checkpoint": str(folder)})


def _check_same_model(source: Any, config: RunConfig) -> None:
    model = (
        ((source.config or {}).get("model") or {}).get("path") if isinstance(source.config, dict) else None
    )
    if model != config.model.path:
        raise StartRefused(
            "start_from.run",
            f"run {source.pk} trained {model or 'no model'}, not this config's model.path {config.model.path}: "
            f"set model.path to {model} or start from a run of {config.model.path}",
        )


def _checkpoint_of(source: Any, step: int | None) -> tuple[int, Path]:
    saved = source.checkpoints.filter(deleted=False)
    checkpoint = (
        (saved.filter(step=step) if step is not None else saved).order_by("-step", "-received").first()
    )
    if checkpoint is None:
        which = f"of step {step}" if step is not None else "at all"
        steps = sorted(set(saved.values_list("step", flat=True)))
        listed = f": set start_from.step to one of {', '.join(map(str, steps))}" if steps else ""
        raise StartRefused(
            "start_from.step", f"run {source.pk} has no checkpoint {which} still saved{listed}"
        )
    folder = checkpoint_folder(checkpoint)
    if folder is None or not (folder / POLICY_FOLDER).is_dir():
        raise StartRefused(
            "start_from.step",
            f"the checkpoint of step {checkpoint.step} of run {source.pk} has no weights on disk",
        )
    return checkpoint.step, folder


# What an optimiser state belongs to: the same kind of run, advantages and loss (docs/checkpoints.md#fork).
ALGORITHM_PATHS = ("sft.enabled", "algorithm.estimator", "algorithm.policy_loss")


def _check_optimizer(source: Any, config: RunConfig, step: int, folder: Path) -> None:
    if not (folder / OPTIMIZER_FILE).is_file():
        raise StartRefused(
            "start_from.optimizer",
            f"the checkpoint of step {step} of run {source.pk} holds the weights only (its run did not set "
            "trainer.resume): leave start_from.optimizer off to start from its weights",
        )
    parent = flatten_paths(source.config if isinstance(source.config, dict) else {})
    own = flatten_paths(json.loads(config.to_json()))
    for path in ALGORITHM_PATHS:
        theirs, ours = parent.get(path), own.get(path)
        if theirs != ours:
            raise StartRefused(
                "start_from.optimizer",
                f"run {source.pk} trained with {path} {theirs}, this config with {ours}: an optimiser "
                "state belongs to the algorithm that made it; leave start_from.optimizer off, or set "
                f"{path} back to {theirs}",
            )
    if (parent.get("model.lora_rank") or 0) > 0:
        raise StartRefused(
            "start_from.optimizer",
            f"run {source.pk} trained LoRA adapters, which this run merges: their optimiser state does "
            "not apply; leave start_from.optimizer off",
        )
