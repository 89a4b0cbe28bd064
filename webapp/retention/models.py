"""Which of a run's trajectories are stored, and what they take (docs/rollouts.md#retention,
docs/rollouts.md#storage): the policy an experiment's runs start with and each run's own, with the
counters ingestion keeps.

The retention app sits below experiments (docs/architecture.md#layers): an experiment is created
with a policy and ingestion obeys it, so both import it. Its two models name Experiment and Run by
Django's lazy reference ("experiments.Run"), which imports nothing.
"""

from __future__ import annotations

from django.db import models


class RetentionKind(models.TextChoices):
    ALL = "all", "keep everything"
    FAILURES = "failures", "all failures plus k successes per training step"
    SAMPLE = "sample", "a sample of the trajectories"


class RetentionSettings(models.Model):
    """Which of a run's trajectories are stored (webapp.retention.policy decides by these)."""

    retention = models.CharField(max_length=10, choices=RetentionKind.choices, default=RetentionKind.ALL)
    keep_successes = models.IntegerField(default=4, help_text="k: successes kept per training step.")
    sample_fraction = models.FloatField(default=0.1, help_text="The fraction of trajectories a sample keeps.")

    class Meta:
        abstract = True


class ExperimentRetention(RetentionSettings):
    """The policy chosen when the experiment was created: each of its runs starts with it."""

    experiment = models.OneToOneField(
        "experiments.Experiment", on_delete=models.CASCADE, primary_key=True, related_name="retention"
    )

    class Meta:
        db_table = "results_experimentretention"


class RunStorage(RetentionSettings):
    """A run's retention policy and what its trajectories take: counters kept up to date by ingestion
    in its own transaction, set right after a retention change (webapp.ingestion.storage)."""

    run = models.OneToOneField(
        "experiments.Run", on_delete=models.CASCADE, primary_key=True, related_name="storage"
    )
    received = models.BigIntegerField(default=0, help_text="Trajectories that arrived (replays not counted).")
    kept = models.BigIntegerField(default=0, help_text="Trajectories stored now.")
    trajectory_bytes = models.BigIntegerField(default=0)
    step_bytes = models.BigIntegerField(default=0, help_text="The steps' rows, less their token signals.")
    token_signal_bytes = models.BigIntegerField(default=0)
    tool_call_bytes = models.BigIntegerField(default=0)
    text_bytes = models.BigIntegerField(default=0, help_text="The texts this run was first to store.")
    changed_at = models.DateTimeField(null=True, blank=True, help_text="The policy was last changed.")
    applied_at = models.DateTimeField(null=True, blank=True, help_text="... and applied to the stored data.")

    class Meta:
        db_table = "results_runstorage"

    @property
    def total_bytes(self) -> int:
        return (
            self.trajectory_bytes
            + self.step_bytes
            + self.token_signal_bytes
            + self.tool_call_bytes
            + self.text_bytes
        )

    @property
    def applying(self) -> bool:
        """A change whose deletions have not run yet (the task is queued or running)."""
        return self.changed_at is not None and (self.applied_at is None or self.applied_at < self.changed_at)


class KeepMode(models.TextChoices):
    MAX = "max", "highest"
    MIN = "min", "lowest"


class CheckpointKeepPolicy(models.Model):
    """Which checkpoints of an experiment's runs stay on disk (docs/checkpoints.md#keep-policies):
    the rules combine, a checkpoint any of them keeps stays (webapp.retention.checkpoint_policy)."""

    experiment = models.OneToOneField(
        "experiments.Experiment", on_delete=models.CASCADE, primary_key=True, related_name="checkpoint_policy"
    )
    keep_last = models.PositiveIntegerField(
        null=True, blank=True, help_text="The newest k; none: no such rule."
    )
    keep_every = models.PositiveIntegerField(
        null=True, blank=True, help_text="Those whose step is a multiple of n; none: no such rule."
    )
    keep_best_metric = models.CharField(
        max_length=200, blank=True, help_text="A metric key; empty: no such rule."
    )
    keep_best_mode = models.CharField(max_length=3, choices=KeepMode.choices, default=KeepMode.MAX)
    keep_best_count = models.PositiveIntegerField(default=1)
