"""The line under the experiment form's Advanced fields that says how much disk each run's checkpoints
take (docs/checkpoints.md#sizes), from the model's size as trainer.model_size reads it."""

from __future__ import annotations

from dataclasses import dataclass

from django.template.defaultfilters import filesizeformat

from trainer.config_sections import CRITIC_ESTIMATORS
from trainer.model_size import checkpoint_bytes


@dataclass(frozen=True)
class CheckpointPlan:
    """What the form says about a run's checkpoints: the fields the size depends on."""

    model_path: str
    dtype: str
    estimator: str
    lora_rank: int = 0
    resume: bool = False
    keep: int | None = 1

    @property
    def each_bytes(self) -> int | None:
        critic = self.estimator in CRITIC_ESTIMATORS
        return checkpoint_bytes(
            self.model_path, dtype=self.dtype, lora_rank=self.lora_rank, critic=critic, resumable=self.resume
        )

    def describe(self) -> str:
        each = self.each_bytes
        if each is None:
            return "Checkpoint size: unknown until the model folder can be read (its config.json)."
        what = "the LoRA adapters" if self.lora_rank else f"the weights in {self.dtype}"
        if self.estimator in CRITIC_ESTIMATORS:
            what += " and the critic's"
        if self.resume:
            what += ", with the optimizer state"
        kept = (
            "every checkpoint is kept"
            if self.keep is None
            else f"at most {self.keep} kept, about {filesizeformat(each * self.keep)} on disk per run"
        )
        return f"Expected checkpoint size: about {filesizeformat(each)} each ({what}); {kept}."
