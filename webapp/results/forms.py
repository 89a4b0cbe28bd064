from __future__ import annotations

from typing import Any

from django import forms

from webapp.experiments.models import MAX_LABEL_LENGTH
from webapp.retention.models import RetentionKind
from webapp.retention.policy import MAX_KEEP_SUCCESSES, Retention
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

    def __init__(self, *args: object, data_sources: list[str] = (), **kwargs: object) -> None:  # type: ignore[assignment]
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["data_source"].choices = [("", "any"), *((s, s or "(none)") for s in data_sources)]  # type: ignore[attr-defined]

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
        )


class RunsActionForm(forms.Form):
    """What the runs table's toolbar asks for the selected runs."""

    READS = ("overlay", "compare")  # open a page about the runs; any member of the team may
    WRITES = ("archive", "restore", "tag", "untag", "delete")  # need the member role

    action = forms.ChoiceField(choices=[(name, name) for name in READS + WRITES])
    tag = forms.CharField(required=False, max_length=MAX_LABEL_LENGTH, strip=True)
    run = forms.CharField(required=False)  # repeated: the selected runs' ids (read with getlist)

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        ids = self.data.getlist("run") if hasattr(self.data, "getlist") else []
        if not ids:
            raise forms.ValidationError("Select one or more runs first.")
        if not all(str(pk).isdigit() for pk in ids):
            raise forms.ValidationError("Run ids are numbers.")
        cleaned["runs"] = [int(pk) for pk in ids]
        if cleaned.get("action") in ("tag", "untag") and not cleaned.get("tag"):
            self.add_error("tag", "Type the tag to add or remove.")
        return cleaned


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


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class DumpFilesField(forms.FileField):
    """One or more files from one input (Django's documented pattern for several files)."""

    def clean(self, data: Any, initial: Any = None) -> Any:
        single = super().clean
        return (
            [single(d, initial) for d in data] if isinstance(data, list | tuple) else [single(data, initial)]
        )


class ImportForm(forms.Form):
    """A run trained elsewhere: its rollout dumps and, optionally, its metrics (docs/imports.md)."""

    dump = DumpFilesField(
        widget=MultipleFileInput(attrs={"accept": ".jsonl"}), label="Rollout dumps",
        help_text="The {global_step}.jsonl files of Agent-R1's or verl's rollout_data_dir (choose several).",
    )  # fmt: skip
    metrics = forms.FileField(
        required=False, label="Metrics (optional)",
        help_text='JSON lines: verl\'s file logger ({"step": n, "data": {...}}) or {"step": n, "key": value}.',
    )  # fmt: skip
    experiment = forms.CharField(max_length=200, initial="imports", help_text="The experiment it goes into.")
    name = forms.CharField(max_length=200, required=False, help_text="The run's name (default: run-<id>).")


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
        min_value=0.0001, max_value=1.0, initial=0.1, required=False, label="Sample fraction",
        help_text="The fraction of trajectories a sample keeps, e.g. 0.1.",
    )  # fmt: skip

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
