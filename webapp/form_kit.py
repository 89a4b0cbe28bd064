"""What the web apps' forms share: a field taken from the model field it fills, and the form's errors
as a page says them."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models


def model_form_field(model: type[models.Model], name: str, **options: Any) -> forms.Field:
    """``model``'s field ``name`` as a form field, so that its type, length, choices, default and whether
    it may be left empty are written once, on the model; ``options`` adds the label, help and bounds."""
    field = model._meta.get_field(name)
    made = field.formfield(**options) if isinstance(field, models.Field) else None
    if made is None:
        raise ValueError(f"{model.__name__}.{name} has no form field")
    return made


def labelled_errors(form: forms.BaseForm) -> list[str]:
    """Every error of the bound ``form``, each after its field's label (as the page shows it; a form-wide
    error alone)."""
    return [
        f"{form[name].label}: {message}" if name in form.fields else str(message)
        for name, messages in form.errors.items()
        for message in messages
    ]
