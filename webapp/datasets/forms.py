from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms

from webapp.datasets.files import UPLOAD_FIELD, StreamedUpload


class UploadForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")
    file = forms.FileField(help_text="A parquet file in the data contract.")

    def __init__(self, *args: Any, rejection: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rejection = rejection

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.rejection:
            # The upload handler stopped reading; say why instead of "this field is required".
            self.errors.pop(UPLOAD_FIELD, None)
            raise forms.ValidationError(self.rejection, code="too_large")
        upload = cleaned.get(UPLOAD_FIELD)
        if upload is not None and not isinstance(upload, StreamedUpload):
            raise forms.ValidationError("The upload did not go through the streaming handler.")
        if upload is not None and not cleaned.get("name"):
            cleaned["name"] = Path(upload.name or "dataset").stem
        return cleaned

    @property
    def upload(self) -> StreamedUpload | None:
        upload = self.files.get(UPLOAD_FIELD)
        return upload if isinstance(upload, StreamedUpload) else None


class RecipeForm(forms.Form):
    task = forms.ChoiceField(help_text="The built-in recipe whose prepare step writes the dataset.")
    input_path = forms.CharField(
        max_length=500,
        required=False,
        label="Server-side raw data (staff only)",
        help_text="An absolute path on the workers to the recipe's raw files. Blank: the recipe's fixtures.",
    )

    def __init__(self, *args: Any, tasks: list[tuple[str, str]], is_staff: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        task_field = self.fields["task"]
        if isinstance(task_field, forms.ChoiceField):
            task_field.choices = tasks
        self.is_staff = is_staff

    def clean_input_path(self) -> str:
        value: str = self.cleaned_data.get("input_path", "").strip()
        if value and not self.is_staff:
            raise forms.ValidationError("Only staff may prepare a recipe from a server-side path.")
        if value and not Path(value).is_absolute():
            raise forms.ValidationError("Give an absolute path.")
        return value
