from __future__ import annotations

from typing import Any

from django import forms

from webapp.retention.models import RetentionKind
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
