"""The experiment form: a thin layer over RunConfig.

Fields are named by RunConfig's dotted paths and built from its pydantic field definitions (type,
bounds, help text), so the form cannot drift from the config. What it sends is accepted or refused
by webapp.experiments.acceptance.accept, as every other way of making an experiment is; each refusal
lands on the field whose path it names.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from django import forms
from django.urls import reverse
from pydantic.fields import FieldInfo

from trainer.backends import BACKENDS
from trainer.config import RunConfig, _section_model, flatten_paths, honoured_fields
from trainer.config_sections import where_text
from trainer.contract import INT4_MAX
from webapp.accounts.models import Team
from webapp.experiments.acceptance import MAX_NAME_LENGTH, MAX_SEEDS, Refused, accept
from webapp.experiments.checkpoint_size import CheckpointPlan
from webapp.experiments.models import MAX_LABEL_LENGTH
from webapp.retention.forms import CheckpointPolicyForm, RetentionForm

# The run-kind box, and the inputs a refresh of the dataset pickers reads (the task and that box).
SFT_FIELD = "sft.enabled"
PICKER_INPUTS = f"#id_task, [name='{SFT_FIELD}']"
# Shown in the main form; everything else of RunConfig keeps the preset's value.
BASIC_PATHS = [
    SFT_FIELD,
    "start_from.run",
    "start_from.step",
    "start_from.optimizer",
    "rollout.max_steps",
    "rollout.context_policy",
    "data.reward_rule",
    "executor",
    "backend",
    "resources.gpus_per_node",
    "resources.nodes",
    "resources.cpus",
    "resources.memory_gb",
    "resources.where",
]
# Under "advanced": filled from the preset (and the task's recipe), all editable.
ADVANCED_PATHS = [
    "algorithm.estimator",
    "algorithm.policy_loss",
    "algorithm.kl_mode",
    "algorithm.kl_coef",
    "algorithm.gamma",
    "algorithm.lam",
    "algorithm.norm_adv_by_std",
    "algorithm.clip_low",
    "algorithm.clip_high",
    "algorithm.loss_agg_mode",
    "algorithm.entropy_coef",
    "algorithm.skip_zero_advantage_groups",
    "rollout.n",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.max_new_tokens",
    "rollout.window",
    "rollout.tool_warmup_steps",
    "optim.lr",
    "optim.critic_lr",
    "optim.ppo_epochs",
    "optim.mini_batch_size",
    "optim.micro_batch_size",
    "trainer.total_steps",
    "trainer.batch_size",
    "trainer.val_every",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.checkpoint_on_cancel",
    "trainer.resume",  # docs/resume.md#making-a-run-resumable
    "data.max_prompt_length",
    "data.max_response_length",
    "model.dtype",
    "model.lora_rank",
    "sft.max_length",
    "sft.train_turns",  # docs/sft.md#which-turns-are-trained
]
# Labels a field's last name does not say well enough on its own.
LABELS = {
    "sft.enabled": "Supervised fine-tuning (SFT) on demonstrations",
    "start_from.run": "Start from run",
    "start_from.step": "Start from checkpoint step",
    "start_from.optimizer": "Keep optimiser state",
    "sft.max_length": "SFT packed length",
    "sft.train_turns": "SFT trains these assistant turns",
    "resources.memory_gb": "Memory (GiB)",
    "resources.where": "Where to run (Ray resources)",
}

MODEL_CHOICES = [
    ("smollm2-135m-instruct", "SmolLM2-135M-Instruct (built in, offline)"),
    ("tiny-test", "Tiny random test model (for smoke runs)"),
    ("path", "A local Hugging Face folder…"),
]


def preset_choices(model_path: str, backend: str) -> list[tuple[str, str]]:
    """Each preset with its description, the defaults it names being those this model and backend
    get (docs/presets.md#defaults-by-model-size)."""
    from trainer.algos.presets import PRESETS
    from trainer.model_size import parameter_count

    honoured = honoured_fields(backend) if backend in BACKENDS else ()
    parameters = parameter_count(model_path)
    choices = []
    for name in PRESETS.names():
        preset = PRESETS.get(name)
        choices.append((name, f"{name} — {preset.describe(preset.defaults_for(parameters, honoured))}"))
    return choices


def pydantic_field(path: str) -> FieldInfo:
    model: Any = RunConfig
    *sections, leaf = path.split(".")
    for name in sections:
        model = _section_model(model, name)
    return typing.cast(FieldInfo, model.model_fields[leaf])


# Words of RunConfig's field names that are written in capitals (or otherwise) in a label.
LABEL_WORDS = {
    "kl": "KL",
    "lr": "LR",
    "gpus": "GPUs",
    "cpus": "CPUs",
    "ppo": "PPO",
    "adv": "advantage",
    "dtype": "dtype",
}


def field_label(path: str) -> str:
    """A RunConfig path's last name as a label in sentence case: rollout.max_steps → "Max steps"."""
    if path in LABELS:
        return LABELS[path]
    words = [LABEL_WORDS.get(word, word) for word in path.split(".")[-1].split("_")]
    text = " ".join(words)
    return text[:1].upper() + text[1:]


def form_field(path: str) -> forms.Field:
    """A Django field for one RunConfig path: type, choices, bounds and help text from pydantic."""
    info = pydantic_field(path)
    annotation = info.annotation
    label = field_label(path)
    common: dict[str, Any] = {"label": label, "help_text": info.description or "", "required": False}
    if typing.get_origin(annotation) is typing.Literal:
        return forms.ChoiceField(choices=[(v, v) for v in typing.get_args(annotation)], **common)
    if annotation is bool:
        return forms.BooleanField(**common)
    bounds = {m.__class__.__name__: m for m in info.metadata}
    if annotation in (int, int | None):  # an empty optional number keeps the default
        lower = getattr(bounds.get("Ge"), "ge", None)
        return forms.IntegerField(min_value=lower, **common)
    if annotation is float:
        return forms.FloatField(**common)
    return forms.CharField(**common)


class ExperimentForm(RetentionForm, CheckpointPolicyForm):
    """An experiment's config, the retention policy its runs start with (RetentionForm), and which of
    their checkpoints stay on disk (CheckpointPolicyForm)."""

    name = forms.CharField(max_length=MAX_NAME_LENGTH, label="Name")
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, label="Description"
    )
    task = forms.ChoiceField(
        label="Task", help_text="The recipe whose reward, tools and defaults the runs use."
    )
    preset = forms.ChoiceField(
        label="Preset", help_text="Fills estimator, loss and defaults below (all editable under Advanced)."
    )
    train_dataset = forms.ChoiceField(label="Training dataset")
    val_dataset = forms.ChoiceField(label="Validation dataset", required=False)
    model_choice = forms.ChoiceField(label="Model", choices=MODEL_CHOICES)
    model_path = forms.CharField(
        label="Local model folder",
        required=False,
        max_length=1000,
        help_text="Used when Model is a local folder: a Hugging Face folder under STUDIO_MODELS_DIR "
        "(a relative path is taken inside it).",
    )
    tools = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="Tools")
    seeds = forms.CharField(
        initial="1", label="Seeds", help_text="Comma-separated seeds; each seed is one run (e.g. 1,2,3)."
    )
    launch = forms.BooleanField(initial=True, required=False, label="Launch the runs now")

    def __init__(
        self, *args: Any, team: Team, choices: Mapping[str, list[tuple[str, str]]], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.team = team  # the team whose datasets, tools and rewards the config may name
        for name in ("task", "train_dataset", "tools"):
            self.fields[name].choices = choices[name]  # type: ignore[attr-defined]
        # No dataset is chosen for the user unless the view preselects one: an empty first choice.
        self.fields["train_dataset"].choices = [("", "— choose a dataset —"), *choices["train_dataset"]]  # type: ignore[attr-defined]
        self.fields["val_dataset"].choices = [("", "— none —"), *choices["train_dataset"]]  # type: ignore[attr-defined]
        for path in BASIC_PATHS + ADVANCED_PATHS:
            self.fields[path] = form_field(path)
        self.fields["preset"].choices = preset_choices(self._chosen("model_path"), self._chosen("backend"))  # type: ignore[attr-defined]
        # Ticking SFT refreshes the dataset pickers as a task switch does: they list demonstrations then.
        self.fields[SFT_FIELD].widget.attrs.update(
            {
                "hx-get": reverse("experiment_new", args=[team.slug]),
                "hx-include": PICKER_INPUTS,
                "hx-swap": "none",
            }
        )

    def allow_preview(self) -> None:
        """A preview needs no name yet (RunConfig's default stands in): it is often the first thing
        someone new tries."""
        self.fields["name"].required = False

    def explain_datasets(self, hint: str) -> None:
        """Say under each dataset picker what it lists and why it lists no other dataset."""
        for name in ("train_dataset", "val_dataset"):
            self.fields[name].help_text = hint

    def _chosen(self, name: str) -> str:
        """The model folder (or alias) or the backend the form shows: sent, else initial."""
        if name == "model_path" and self["model_choice"].value() != "path":
            name = "model_choice"
        return str(self[name].value() or "")

    @property
    def main_fields(self) -> list[forms.BoundField]:
        names = [
            "name",
            "description",
            "task",
            "train_dataset",
            "val_dataset",
            "model_choice",
            "model_path",
            "tools",
            "seeds",
        ]
        return [self[name] for name in names]

    @property
    def task_fields(self) -> list[forms.BoundField]:
        """The fields a task switch refreshes: the datasets that fit the task, and what its recipe fills."""
        return [self["train_dataset"], self["val_dataset"], self["tools"], self["rollout.max_steps"]]

    @property
    def basic_fields(self) -> list[forms.BoundField]:
        return [self[path] for path in BASIC_PATHS]

    @property
    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[path] for path in ADVANCED_PATHS] + [self[name] for name in self.RETENTION_FIELDS]

    @property
    def keep_policy_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.KEEP_POLICY_FIELDS]

    @property
    def keep_policy_refused(self) -> bool:
        """Whether a keep-policy field has an error: its folded section opens to show it."""
        return any(field.errors for field in self.keep_policy_fields)

    @property
    def checkpoint_plan(self) -> CheckpointPlan:
        """The checkpoints the form's values make: the line under Advanced says their size."""
        keep = self["trainer.keep_checkpoints"].value()
        return CheckpointPlan(
            model_path=self._chosen("model_path"),
            dtype=str(self["model.dtype"].value() or "float32"),
            estimator=str(self["algorithm.estimator"].value() or ""),
            keep=int(keep) if str(keep or "").isdigit() and int(keep) > 0 else 1,
        )

    def clean_seeds(self) -> list[int]:
        raw = self.cleaned_data["seeds"]
        try:
            seeds = [int(part) for part in str(raw).replace(" ", "").split(",") if part]
        except ValueError:
            raise forms.ValidationError(
                "Seeds must be whole numbers separated by commas, e.g. 1,2,3."
            ) from None
        if not seeds or len(seeds) != len(set(seeds)) or len(seeds) > MAX_SEEDS:
            raise forms.ValidationError(f"Give between 1 and {MAX_SEEDS} different seeds.")
        if not all(0 <= seed <= INT4_MAX for seed in seeds):
            raise forms.ValidationError(f"Seeds lie between 0 and {INT4_MAX}.")
        return seeds

    def build_config(self) -> RunConfig | None:
        """The RunConfig these fields describe (the form's values over the task recipe's defaults over
        the preset's, RunConfig.from_preset's rule) as accept returns it, or None with its refusals
        put on the fields."""
        data = self.cleaned_data
        if data["model_choice"] == "path" and not data["model_path"]:
            self.add_error("model_path", "Give the folder of a Hugging Face model on the workers.")
            return None
        fields = {
            path: data[path] for path in BASIC_PATHS + ADVANCED_PATHS if data.get(path) not in (None, "")
        }
        fields.update(
            {
                "preset": data["preset"],
                "task": data["task"],
                "model.path": data["model_path"] if data["model_choice"] == "path" else data["model_choice"],
                "data.train_path": f"dataset:{data['train_dataset']}",
                "data.val_path": f"dataset:{data['val_dataset']}" if data.get("val_dataset") else None,
                "rollout.tools": list(data.get("tools") or []),
                "trainer.seed": data["seeds"][0],
            }
        )
        if data["name"]:  # always, but for a preview
            fields["name"] = data["name"]
        try:
            config = accept(self.team, fields)
        except Refused as refused:
            self._place_errors(refused.by_path())
            return None
        policy = self.keep_policy()
        for field, message in policy.problems(config):
            self.add_error(field, message)
        return None if policy.problems(config) else policy.trainer_config(config)

    def _place_errors(self, errors: Mapping[str, list[str]]) -> None:
        aliases = {
            "data.train_path": "train_dataset",
            "data.val_path": "val_dataset",
            "model.path": "model_path",
            "rollout.tools": "tools",
            "trainer.seed": "seeds",
            "preset": "preset",
            "task": "task",
            "name": "name",
        }
        for path, messages in errors.items():
            if path == "__all__":  # verl's message names no field of ours
                for message in messages:
                    self.add_error(None, message)
                continue
            field = aliases.get(path, path)
            for message in messages:
                self.add_error(
                    field if field in self.fields else None,
                    f"{message}" if field in self.fields else f"{path}: {message}",
                )


def initial_from_config(config: RunConfig) -> dict[str, Any]:
    """Form initial values for an existing config (the clone form and the preset switch)."""
    flat = flatten_paths(config.model_dump())
    initial = {path: flat[path] for path in BASIC_PATHS + ADVANCED_PATHS}
    initial["resources.where"] = where_text(config.resources.where)
    model_path = config.model.path
    known = {value for value, _ in MODEL_CHOICES}
    initial.update(
        name=config.name,
        task=config.task,
        preset=config.preset,
        model_choice=model_path if model_path in known else "path",
        model_path="" if model_path in known else model_path,
        train_dataset=config.data.train_path.removeprefix("dataset:"),
        val_dataset=(config.data.val_path or "").removeprefix("dataset:"),
        tools=list(config.rollout.tools),
    )
    return initial


class RunEditForm(forms.Form):
    """The run page's rename, note and tags (comma-separated)."""

    name = forms.CharField(required=False, max_length=250, label="Name")
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Note")
    tags = forms.CharField(
        required=False, max_length=1000, label="Tags", help_text="Comma-separated, e.g. baseline, lr-sweep."
    )

    def clean_tags(self) -> list[str]:
        labels = [part.strip() for part in self.cleaned_data["tags"].split(",") if part.strip()]
        too_long = [label for label in labels if len(label) > MAX_LABEL_LENGTH]
        if too_long:
            raise forms.ValidationError(
                f"A tag has at most {MAX_LABEL_LENGTH} characters: {too_long[0][:80]!r}."
            )
        return labels
