"""The playground's form: which models answer, the prompt or a dataset row, the tools
(docs/playground.md#asking)."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.experiments.models import Experiment
from webapp.playground.services import Ask, experiment_config, model_choices

SPLITS = [("train", "training dataset"), ("val", "validation dataset")]


class PlaygroundForm(forms.Form):
    model_a = forms.ChoiceField(label="Model")
    model_b = forms.ChoiceField(label="Side by side with", required=False)
    prompt = forms.CharField(
        label="Prompt", required=False, max_length=20_000, widget=forms.Textarea(attrs={"rows": 4})
    )
    ground_truth = forms.CharField(
        label="Ground truth",
        required=False,
        max_length=2_000,
        help_text="Scores the answer with the task's reward.",
    )
    split = forms.ChoiceField(label="Or a row of the", choices=SPLITS, required=False)
    row_index = forms.IntegerField(label="Row", min_value=0, required=False, help_text="Its index, from 0.")
    tools = forms.MultipleChoiceField(label="Tools", required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, experiment: Experiment, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = model_choices(experiment)
        self.fields["model_a"].choices = choices  # type: ignore[attr-defined]
        self.fields["model_b"].choices = [("", "— none —"), *choices]  # type: ignore[attr-defined]
        tools = experiment_config(experiment).rollout.tools
        self.fields["tools"].choices = [(tool, tool) for tool in tools]  # type: ignore[attr-defined]
        self.fields["tools"].initial = list(tools)

    def ask(self) -> Ask:
        data = self.cleaned_data
        return Ask(
            choices=[choice for choice in (data["model_a"], data["model_b"]) if choice],
            prompt=data["prompt"],
            ground_truth=data["ground_truth"],
            split=data["split"] or "train",
            row_index=data["row_index"],
            tools=data["tools"],
        )
