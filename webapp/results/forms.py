from __future__ import annotations

from typing import Any

from django import forms

from webapp.experiments.models import MAX_LABEL_LENGTH


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
        widget=MultipleFileInput(attrs={"accept": ".jsonl"}),
        label="Rollout dumps",
        help_text="The {global_step}.jsonl files of Agent-R1's or verl's rollout_data_dir (choose several).",
    )
    metrics = forms.FileField(
        required=False,
        label="Metrics (optional)",
        help_text='JSON lines: verl\'s file logger ({"step": n, "data": {...}}) or {"step": n, "key": value}.',
    )
    experiment = forms.CharField(max_length=200, initial="imports", help_text="The experiment it goes into.")
    name = forms.CharField(max_length=200, required=False, help_text="The run's name (default: run-<id>).")
