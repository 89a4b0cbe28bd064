"""An experiment's keep-policy for checkpoints (docs/checkpoints.md#keep-policies): which checkpoints
of each of its runs stay on disk. Pure: ingestion asks it as each checkpoint arrives and deletes the
rest (webapp.ingestion.checkpoint_keeping).

The rules combine: a checkpoint stays when any rule keeps it, and the newest checkpoint of a run always
stays (a resume continues from it, and the trainer may still be writing the next one). With a policy
the web app decides, so the trainer keeps every checkpoint itself (``trainer.keep_checkpoints: null``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.config import RunConfig
from trainer.contract import EVAL_KEYS, SFT_KEYS, VAL_PREFIX
from webapp.retention.models import CheckpointKeepPolicy, KeepMode

Problem = tuple[str, str]


@dataclass(frozen=True)
class KeepPolicy:
    keep_last: int | None = None
    keep_every: int | None = None
    keep_best_metric: str = ""
    keep_best_mode: str = KeepMode.MAX
    keep_best_count: int = 1

    @classmethod
    def of(cls, row: CheckpointKeepPolicy) -> KeepPolicy:
        return cls(**{field.name: getattr(row, field.name) for field in dataclasses.fields(cls)})

    @classmethod
    def of_experiment(cls, experiment_id: int) -> KeepPolicy | None:
        row = CheckpointKeepPolicy.objects.filter(experiment_id=experiment_id).first()
        return cls.of(row) if row is not None else None

    @property
    def active(self) -> bool:
        return bool(self.keep_last or self.keep_every or self.keep_best_metric)

    def fields(self) -> dict[str, Any]:
        """As CheckpointKeepPolicy's fields (its fields bear the same names)."""
        return dataclasses.asdict(self)

    def save_for(self, experiment: Any) -> None:
        if self.active:
            CheckpointKeepPolicy.objects.update_or_create(experiment=experiment, defaults=self.fields())

    def describe(self) -> str:
        rules = []
        if self.keep_last:
            rules.append(f"the last {self.keep_last}")
        if self.keep_best_metric:
            rules.append(
                f"the best {self.keep_best_count} by {self.keep_best_metric} ({KeepMode(self.keep_best_mode).label})"
            )
        if self.keep_every:
            rules.append(f"every {self.keep_every} steps")
        return "keep " + ", ".join(rules) if rules else "keep what the trainer keeps"

    def trainer_config(self, config: RunConfig) -> RunConfig:
        """The config its runs train with: the trainer keeps every checkpoint and the policy decides."""
        return config.with_overrides(**{"trainer.keep_checkpoints": None}) if self.active else config

    def kept(self, checkpoints: Sequence[tuple[int, Mapping[str, Any]]]) -> set[int]:
        """The steps that stay of one run's saved checkpoints, given as (step, its metrics)."""
        steps = sorted({step for step, _ in checkpoints})
        if not steps or not self.active:
            return set(steps)
        keep = {steps[-1]}
        if self.keep_last:
            keep.update(steps[-self.keep_last :])
        if self.keep_every:
            keep.update(step for step in steps if step % self.keep_every == 0)
        if self.keep_best_metric:
            keep.update(self._best(checkpoints))
        return keep

    def _best(self, checkpoints: Sequence[tuple[int, Mapping[str, Any]]]) -> list[int]:
        # A checkpoint without the metric (it was not measured at its step) is ranked by nothing.
        scored = [
            (float(metrics[self.keep_best_metric]), step)
            for step, metrics in checkpoints
            if isinstance(metrics.get(self.keep_best_metric), int | float)
            and math.isfinite(metrics[self.keep_best_metric])
        ]
        highest_first = self.keep_best_mode == KeepMode.MAX
        # Equal values: the earlier step wins (it reached that score first).
        scored.sort(key=lambda pair: (-pair[0] if highest_first else pair[0], pair[1]))
        return [step for _, step in scored[: self.keep_best_count]]

    def problems(self, config: RunConfig) -> list[Problem]:
        """A policy its runs could never follow, on the field to change (docs/checkpoints.md#keep-policies)."""
        metric = self.keep_best_metric
        if not metric:
            return []
        why = _never_logged(metric, config)
        return [("keep_best_metric", f"{why}: choose another metric or leave it empty")] if why else []


def _never_logged(metric: str, config: RunConfig) -> str:
    """Why a run of ``config`` never reports ``metric`` with a checkpoint, else ""."""
    if config.backend == "verl":  # its checkpoints are found on disk, reported without metrics
        return "backend verl reports its checkpoints without their metrics, so none is ever best"
    if metric in EVAL_KEYS:
        return f"{metric} is an evaluation's score, which no training run reports"
    if config.sft.enabled and metric not in SFT_KEYS:
        return f"an SFT run reports {', '.join(SFT_KEYS)}, not {metric}"
    if not config.sft.enabled and metric in SFT_KEYS:
        return f"{metric} is an SFT run's, and this run does RL"
    if metric.startswith(VAL_PREFIX) and not config.data.val_path:
        return f"{metric} is a validation score and this run has no validation split (data.val_path)"
    return ""
