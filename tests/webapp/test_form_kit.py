"""What the web apps' forms share (webapp/form_kit.py): fields taken from the model, errors said with labels."""

from __future__ import annotations

import pytest
from django import forms

from webapp.form_kit import labelled_errors, model_form_field
from webapp.retention.models import CheckpointKeepPolicy
from webapp.tools.forms import RewardForm
from webapp.tools.models import TeamReward


class _Sample(forms.Form):
    max_rows = forms.IntegerField(min_value=1)
    temperature = forms.FloatField(label="Sampling temperature", max_value=2.0)

    def clean(self) -> dict[str, object]:
        raise forms.ValidationError("Nothing to score.")


def test_each_error_follows_the_label_the_page_shows() -> None:
    form = _Sample({"max_rows": "0", "temperature": "3"})
    assert not form.is_valid()
    assert labelled_errors(form) == [
        "Max rows: Ensure this value is greater than or equal to 1.",
        "Sampling temperature: Ensure this value is less than or equal to 2.0.",
        "Nothing to score.",
    ]


def test_a_field_taken_from_the_model_keeps_its_length_choices_and_default() -> None:
    metric = model_form_field(CheckpointKeepPolicy, "keep_best_metric", label="Metric")
    assert isinstance(metric, forms.CharField)
    assert (metric.max_length, metric.required, metric.label) == (200, False, "Metric")
    mode = model_form_field(CheckpointKeepPolicy, "keep_best_mode", required=False)
    assert isinstance(mode, forms.ChoiceField)
    assert mode.valid_value("min") and not mode.valid_value("best") and mode.initial == "max"
    pattern, stored = RewardForm.base_fields["pattern"], TeamReward._meta.get_field("pattern")
    assert isinstance(pattern, forms.CharField) and pattern.max_length == stored.max_length == 500
    with pytest.raises(ValueError, match=r"TeamReward\.trials has no form field"):
        model_form_field(TeamReward, "trials")  # the reverse side of a relation fills no form field
