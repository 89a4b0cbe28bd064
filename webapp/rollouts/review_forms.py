"""The forms of labelling, queues and saving rollouts as a dataset (docs/annotations.md)."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.rollouts.queues import MAX_REVIEWS, ORDERS, QUEUE_MAX


class AnnotationForm(forms.Form):
    step = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)
    label = forms.CharField(required=False, max_length=60)
    note = forms.CharField(required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 2}))
    corrected_answer = forms.CharField(
        required=False, max_length=10_000, label="Corrected answer", widget=forms.TextInput
    )


class LabelForm(forms.Form):
    name = forms.CharField(max_length=60)
    colour = forms.CharField(max_length=7, initial="#607d8b", widget=forms.TextInput(attrs={"type": "color"}))
    key = forms.CharField(max_length=1, help_text="One character; j, k, n and ? move and help.")


class QueueForm(forms.Form):
    name = forms.CharField(required=False, max_length=200)
    order = forms.ChoiceField(choices=[(o, o) for o in ORDERS], initial="lowest reward")
    limit = forms.IntegerField(min_value=1, max_value=QUEUE_MAX, initial=50, label="How many")
    reviews_wanted = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_REVIEWS, initial=1, label="Reviewers per item"
    )
    assignees = forms.MultipleChoiceField(required=False, choices=[], label="Assign to")

    def __init__(self, *args: Any, members: list[str] = (), **kwargs: Any) -> None:  # type: ignore[assignment]
        super().__init__(*args, **kwargs)
        self.fields["assignees"].choices = [(m, m) for m in members]  # type: ignore[attr-defined]


class PromoteForm(forms.Form):
    name = forms.CharField(required=False, max_length=200, label="Dataset name")
    corrected_only = forms.BooleanField(required=False, label="only prompts with a corrected answer")


def selected_ids(values: list[str]) -> list[int]:
    """The trajectory ids ticked in the rollout list (anything else is ignored)."""
    return [int(v) for v in values if v.isdigit() and len(v) <= 18]
