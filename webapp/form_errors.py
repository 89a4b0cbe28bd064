"""A form's errors as a page says them in a message or a list: each after its field's label."""

from __future__ import annotations

from django import forms


def labelled_errors(form: forms.BaseForm) -> list[str]:
    """Every error of the bound ``form``, each after its field's label (a form-wide error alone)."""
    return [
        f"{form.fields[name].label or name}: {message}" if name in form.fields else str(message)
        for name, messages in form.errors.items()
        for message in messages
    ]
