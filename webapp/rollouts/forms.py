"""The rollout viewer's forms: its filters (read from the query string, so every view is a link),
search within them, and which two rollouts of a prompt to compare."""

from __future__ import annotations

from django import forms

from webapp.ingestion.measures import MEASURE_CHOICES
from webapp.rollouts.labelling import ANY_LABEL, NO_LABEL
from webapp.rollouts.viewer import RolloutFilter

YES_NO = [("", "any"), ("yes", "yes"), ("no", "no")]


def _yes_no(value: str) -> bool | None:
    return {"yes": True, "no": False}.get(value)


class RolloutFilterForm(forms.Form):
    """The rollout list's filters, read from the query string (GET), so every view is a link."""

    step = forms.IntegerField(required=False, min_value=0)
    step_min = forms.IntegerField(required=False, min_value=0, label="From step")
    step_max = forms.IntegerField(required=False, min_value=0, label="To step")
    reward_min = forms.FloatField(required=False, label="Reward ≥")
    reward_max = forms.FloatField(required=False, label="Reward ≤")
    success = forms.ChoiceField(required=False, choices=YES_NO)
    tool_errors = forms.ChoiceField(required=False, choices=YES_NO, label="Tool errors")
    data_source = forms.ChoiceField(required=False, choices=[("", "any")], label="Data source")
    group = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)
    sample = forms.IntegerField(required=False, min_value=0, label="Dataset row")
    label = forms.ChoiceField(required=False, choices=[("", "any")], label="Label")
    measure = forms.ChoiceField(required=False, choices=[("", "any"), *MEASURE_CHOICES], label="Value of")
    measure_min = forms.FloatField(required=False, label="from (≥)")
    measure_below = forms.FloatField(required=False, label="below (<)")

    def __init__(
        self,
        *args: object,
        data_sources: list[str] = (),  # type: ignore[assignment]
        labels: list[str] = (),  # type: ignore[assignment]
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["data_source"].choices = [("", "any"), *((s, s or "(none)") for s in data_sources)]  # type: ignore[attr-defined]
        self.fields["label"].choices = [  # type: ignore[attr-defined]
            ("", "any"),
            (ANY_LABEL, "labelled"),
            (NO_LABEL, "not labelled"),
            *((name, name) for name in labels),
        ]

    def to_filter(self) -> RolloutFilter:
        data = self.cleaned_data if self.is_valid() else {}
        return RolloutFilter(
            step=data.get("step"),
            step_min=data.get("step_min"),
            step_max=data.get("step_max"),
            reward_min=data.get("reward_min"),
            reward_max=data.get("reward_max"),
            success=_yes_no(data.get("success", "")),
            tool_errors=_yes_no(data.get("tool_errors", "")),
            data_source=data.get("data_source", ""),
            group=data.get("group", ""),
            sample=data.get("sample"),
            label=data.get("label", ""),
            measure=data.get("measure", ""),
            measure_min=data.get("measure_min"),
            measure_below=data.get("measure_below"),
        )


class SearchForm(RolloutFilterForm):
    """Full-text search over the stored steps, within the rollout list's filters; ``run`` narrows it
    to one run of the team."""

    q = forms.CharField(max_length=200, strip=True, label="Search for")
    run = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    field_order = ["q"]


class PromptCompareForm(forms.Form):
    """Which two rollouts of one dataset row to set side by side: two training steps (of this run,
    or the second of another run of the team) and which of the n samples."""

    a = forms.IntegerField(required=False, min_value=0, label="Step")
    b = forms.IntegerField(required=False, min_value=0, label="against step")
    run_b = forms.IntegerField(required=False, min_value=1, label="of run (id)")
    rollout = forms.IntegerField(required=False, min_value=0, initial=0, label="Sample #")


class HistogramForm(forms.Form):
    """Which measure the histograms show, and the step of the one-step histogram (default: the
    newest step with rollouts)."""

    measure = forms.ChoiceField(required=False, choices=MEASURE_CHOICES, label="Histogram of")
    step = forms.IntegerField(required=False, min_value=0, label="at step")
