from __future__ import annotations

from typing import Any

from django import forms

from webapp.form_kit import model_form_field
from webapp.retention.checkpoint_policy import KeepPolicy
from webapp.retention.models import CheckpointKeepPolicy, KeepMode, RetentionKind
from webapp.retention.policy import MAX_KEEP_SUCCESSES, Retention


class RetentionForm(forms.Form):
    """A run's retention policy (docs/rollouts.md#retention): on the run page, and in the experiment
    form's Advanced section, where it is the policy each run starts with."""

    retention = forms.ChoiceField(
        choices=RetentionKind.choices,
        initial=RetentionKind.ALL,
        required=False,
        label="Trajectories kept",
        help_text="Everything; every failure plus k successes per training step; or a sample, drawn by a "
        "hash of the trajectory's id. What a policy drops is never stored.",
    )
    keep_successes = forms.IntegerField(
        min_value=0,
        max_value=MAX_KEEP_SUCCESSES,
        initial=4,
        required=False,
        label="Successes kept per step (k)",
    )
    sample_fraction = forms.FloatField(
        min_value=0.0001,
        max_value=1.0,
        initial=0.1,
        required=False,
        label="Sample fraction",
        help_text="The fraction of trajectories a sample keeps, e.g. 0.1.",
    )

    RETENTION_FIELDS = ("retention", "keep_successes", "sample_fraction")

    def retention_policy(self) -> Retention:
        """The policy the (valid) form describes; a field left empty keeps its initial value."""
        data = self.cleaned_data
        chosen: dict[str, Any] = {name: data.get(name) for name in self.RETENTION_FIELDS}
        for name, value in chosen.items():
            if value in (None, ""):
                chosen[name] = self.fields[name].initial
        return Retention(
            str(chosen["retention"]), int(chosen["keep_successes"]), float(chosen["sample_fraction"])
        )


class CheckpointPolicyForm(forms.Form):
    """An experiment's keep-policy for checkpoints (docs/checkpoints.md#keep-policies), in the
    experiment form: every rule left empty keeps what the trainer keeps (trainer.keep_checkpoints)."""

    keep_last = model_form_field(
        CheckpointKeepPolicy,
        "keep_last",
        min_value=1,
        label="Keep the last k",
        help_text="The newest k checkpoints of each run.",
    )
    keep_best_metric = model_form_field(
        CheckpointKeepPolicy,
        "keep_best_metric",
        label="Keep the best by metric",
        help_text="A metric each checkpoint carries, e.g. val/arithmetic/acc or reward/mean.",
    )
    keep_best_mode = model_form_field(
        CheckpointKeepPolicy, "keep_best_mode", required=False, label="Best is the"
    )
    keep_best_count = model_form_field(
        CheckpointKeepPolicy, "keep_best_count", min_value=1, required=False, label="How many best"
    )
    keep_every = model_form_field(
        CheckpointKeepPolicy,
        "keep_every",
        min_value=1,
        label="Keep every n steps",
        help_text="Those whose step is a multiple of n.",
    )

    KEEP_POLICY_FIELDS = ("keep_last", "keep_best_metric", "keep_best_mode", "keep_best_count", "keep_every")

    def keep_policy(self) -> KeepPolicy:
        """The policy the (valid) form describes."""
        data = self.cleaned_data
        return KeepPolicy(
            keep_last=data.get("keep_last") or None,
            keep_every=data.get("keep_every") or None,
            keep_best_metric=(data.get("keep_best_metric") or "").strip(),
            keep_best_mode=data.get("keep_best_mode") or KeepMode.MAX,
            keep_best_count=data.get("keep_best_count") or 1,
        )
