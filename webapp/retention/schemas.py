"""A retention policy and a run's storage on the REST API (docs/rollouts.md#retention): what an
experiment is created with, what a run's detail shows, what a change of a run's policy sends."""

from __future__ import annotations

from typing import Literal

from ninja import Field, Schema

from trainer.contract import INT4_MAX
from webapp.api import StrictSchema
from webapp.retention.checkpoint_policy import KeepPolicy
from webapp.retention.models import RunStorage
from webapp.retention.policy import MAX_KEEP_SUCCESSES, Retention

RetentionName = Literal["all", "failures", "sample"]


class RetentionIn(StrictSchema):
    """A retention policy: `all` keeps everything; `failures` every failure plus `keep_successes`
    successes per training step; `sample` a fraction, drawn by a hash of the trajectory's id."""

    retention: RetentionName = "all"
    keep_successes: int = Field(4, ge=0, le=MAX_KEEP_SUCCESSES, description="k of `failures`.")
    sample_fraction: float = Field(0.1, gt=0, le=1, allow_inf_nan=False, description="Of `sample`.")

    def policy(self) -> Retention:
        return Retention(self.retention, self.keep_successes, self.sample_fraction)


class RetentionChange(StrictSchema):
    """Only the fields to change; the others keep the run's current values."""

    retention: RetentionName | None = None
    keep_successes: int | None = Field(None, ge=0, le=MAX_KEEP_SUCCESSES)
    sample_fraction: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)


class StorageOut(Schema):
    retention: str
    keep_successes: int
    sample_fraction: float
    policy: str = Field(description="The policy in words.")
    applying: bool = Field(description="A change is being applied to the stored data.")
    received: int = Field(description="Trajectories that arrived (replays not counted).")
    kept: int = Field(description="Trajectories stored now.")
    trajectory_bytes: int
    step_bytes: int
    token_signal_bytes: int
    tool_call_bytes: int
    text_bytes: int = Field(description="The texts this run was first to store (texts are stored once).")
    total_bytes: int

    @staticmethod
    def resolve_policy(obj: RunStorage) -> str:
        return Retention.of(obj).describe()


class CheckpointPolicyIn(StrictSchema):
    """Which checkpoints of each run stay on disk (docs/checkpoints.md#keep-policies): the rules
    combine, and a run's newest checkpoint always stays. Every rule left out keeps what the trainer keeps."""

    keep_last: int | None = Field(None, ge=1, le=INT4_MAX, description="The newest k.")
    keep_every: int | None = Field(
        None, ge=1, le=INT4_MAX, description="Those whose step is a multiple of n."
    )
    keep_best_metric: str = Field("", max_length=200, description="The best by this metric key.")
    keep_best_mode: Literal["max", "min"] = Field(
        "max", description="Whether best is the highest or the lowest."
    )
    keep_best_count: int = Field(1, ge=1, le=INT4_MAX, description="How many best.")

    def policy(self) -> KeepPolicy:
        return KeepPolicy(
            self.keep_last,
            self.keep_every,
            self.keep_best_metric.strip(),
            self.keep_best_mode,
            self.keep_best_count,
        )
