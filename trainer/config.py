"""RunConfig: the one source of truth for a run.

The webapp stores exactly this object as JSON, the trainer fetches it back, and the CLI loads it
from YAML. It is frozen (a run's config never changes under it), rejects unknown fields (a typo
must not silently fall back to a default), and its cross-field checks say what to set instead.
Its sections are :mod:`trainer.config_sections`.

Field paths are dotted (``rollout.n``); the same paths key overrides (``--set rollout.n=8``),
preset defaults, :func:`config_errors` (so the webapp can put a message on the right form field)
and :func:`diff` (the clone page).

Defaults come in one order, :meth:`RunConfig.from_preset`'s: the preset's, then the task recipe's
(:data:`RECIPE_DEFAULTS`, which recipe plugins fill), then the caller's explicit values. The
New-experiment form, the REST API, the CLI and config files all build configs through it.

This module is the trainer's floor (docs/architecture.md#inside-the-trainer): it imports no backend,
preset or model loader. What it asks of them, they register, and the ``trainer`` package's
``__init__`` imports them before any other code of the trainer runs: the backends in
:data:`~trainer.backend_protocol.BACKENDS` (the registry's names are the choices of ``backend``; each
backend lists the fields it refuses, whose messages RunConfig's validation puts on those fields), then
the presets in :data:`PRESETS`. Importing it needs no torch.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from trainer.backend_protocol import BACKENDS, Problem
from trainer.config_sections import (
    CRITIC_ESTIMATORS,
    GROUP_ESTIMATORS,
    GROUP_NEEDS_TWO,
    AlgorithmConfig,
    DataConfig,
    EvaluationConfig,
    ModelConfig,
    OptimConfig,
    ReportConfig,
    ResourcesConfig,
    RolloutConfig,
    Section,
    SftConfig,
    StartFromConfig,
    TrainerConfig,
    section,
)
from trainer.model_size import parameter_count
from trainer.registry import Registry

if TYPE_CHECKING:
    from trainer.algos.presets import Preset

DEFAULT_PRESET = "grpo"

# Per-task RunConfig defaults (dotted path -> value), registered by each task recipe under its task
# name when the recipe's plugin is imported (trainer.plugins); the trainer keeps no task table.
RECIPE_DEFAULTS: Registry[Mapping[str, Any]] = Registry("task recipe")
# Algorithm presets (estimator, loss, defaults), registered by trainer.algos.presets, which the
# trainer package's __init__ imports.
PRESETS: Registry[Preset] = Registry("preset")

if TYPE_CHECKING:
    BackendName = str
else:  # the registry's names, so a backend added there is a valid choice here and in the form
    BackendName = Literal[tuple(BACKENDS.names())]


class RunConfig(Section):
    """Everything a run needs. Build one with :meth:`from_preset`; never mutate (it is frozen)."""

    name: str = Field(default="run", min_length=1, description="Human-readable run name.")
    task: str = Field(default="", description="Task (data_source or recipe name) this run trains on.")
    preset: str = Field(
        default=DEFAULT_PRESET, min_length=1, description="Algorithm preset the run started from (PRESETS)."
    )
    backend: BackendName = Field(
        default="torch", description="torch: one process, CPU or one GPU. verl: Ray + vLLM + FSDP on GPUs."
    )
    executor: Literal["local", "ray"] = Field(
        default="local", description="Where the trainer process runs: a local process or a Ray job."
    )
    model: ModelConfig = section(ModelConfig, "The policy model.")
    data: DataConfig = section(DataConfig, "Datasets and length limits.")
    rollout: RolloutConfig = section(RolloutConfig, "Sampling and the agent loop.")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, "Estimator, loss and KL.")
    optim: OptimConfig = section(OptimConfig, "Optimiser and batch sizes.")
    trainer: TrainerConfig = section(TrainerConfig, "Loop length, seeds, checkpoints.")
    resources: ResourcesConfig = section(ResourcesConfig, "What the run asks the cluster for.")
    evaluation: EvaluationConfig = section(
        EvaluationConfig, "Evaluate a model or checkpoint instead of training."
    )
    sft: SftConfig = section(SftConfig, "Supervised fine-tuning on demonstrations instead of RL.")
    start_from: StartFromConfig = section(StartFromConfig, "Another run's checkpoint the weights start from.")
    report: ReportConfig = section(ReportConfig, "Where results go besides the webapp.")

    @model_validator(mode="after")
    def _check_cross_fields(self) -> RunConfig:
        problems = cross_field_problems(self)
        if problems:
            raise CrossFieldError(problems)
        return self

    @property
    def use_critic(self) -> bool:
        """Whether the run trains a critic (the estimator needs values)."""
        return self.algorithm.estimator in CRITIC_ESTIMATORS

    # -- building ---------------------------------------------------------------------------------

    @classmethod
    def from_preset(cls, preset_name: str = DEFAULT_PRESET, /, **overrides: Any) -> RunConfig:
        """The one precedence rule: the preset's estimator, loss, KL mode and defaults (those for the
        size of the model ``model.path`` names, see Preset.defaults_for), then the recipe's defaults of
        the ``task`` the overrides name (:data:`RECIPE_DEFAULTS`), then the overrides, the caller's
        explicit values.

        Overrides are keyed by dotted path (``**{"rollout.n": 8}``) or by section
        (``model={"path": ...}``); either way only the named fields change. A task no recipe has
        registered (its plugin not loaded, or free text) adds nothing.
        """
        preset = PRESETS.get(preset_name)
        flat_overrides = flatten_paths(overrides)
        values: dict[str, Any] = {
            "preset": preset_name,
            "algorithm.estimator": preset.estimator,
            "algorithm.policy_loss": preset.policy_loss,
            "algorithm.kl_mode": preset.kl_mode,
        }
        model_path, backend = flat_overrides.get("model.path"), flat_overrides.get("backend", "torch")
        if backend in BACKENDS:
            parameters = parameter_count(model_path) if isinstance(model_path, str) else None
            values.update(preset.defaults_for(parameters, honoured_fields(backend)))
        else:  # validation names the unknown backend
            values.update(preset.defaults)
        task = flat_overrides.get("task")
        if isinstance(task, str) and task in RECIPE_DEFAULTS:
            values.update(flatten_paths(RECIPE_DEFAULTS.get(task)))
        values.update(flat_overrides)
        return cls.model_validate(nest_paths(values))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], /, **overrides: Any) -> RunConfig:
        """A config file's contents: its preset (default grpo) with the file's fields and ``overrides`` on top."""
        merged = flatten_paths(data)
        merged.update(flatten_paths(overrides))
        name = merged.pop("preset", DEFAULT_PRESET)
        if not isinstance(name, str):
            raise ValueError(f"preset must be a preset name, not {name!r}")
        return cls.from_preset(name, **merged)

    @classmethod
    def from_yaml(cls, text: str, /, **overrides: Any) -> RunConfig:
        data = yaml.safe_load(text)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"a config file must hold a mapping of fields, not {type(data).__name__}")
        return cls.from_mapping(data, **overrides)

    @classmethod
    def from_yaml_file(cls, path: str | Path, /, **overrides: Any) -> RunConfig:
        return cls.from_yaml(Path(path).read_text(encoding="utf-8"), **overrides)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunConfig:
        """Exactly the config :meth:`to_json` wrote (no preset defaults are applied)."""
        return cls.model_validate_json(text)

    def to_json(self, *, indent: int | None = None) -> str:
        # pydantic writes floats in their shortest round-trip form, so from_json(to_json(c)) == c.
        return self.model_dump_json(indent=indent)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    def with_overrides(self, **overrides: Any) -> RunConfig:
        """A new config with the fields at the given dotted paths replaced (validated again)."""
        values = flatten_paths(self.model_dump())
        values.update(flatten_paths(overrides))
        return type(self).model_validate(nest_paths(values))


# -- cross-field checks ----------------------------------------------------------------------------


class CrossFieldError(ValueError):
    """Cross-field problems, each with the dotted path of the field to change."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(message for _, message in problems))


def cross_field_problems(config: RunConfig) -> list[Problem]:
    """Every cross-field problem as (field path, message saying what to set)."""
    problems: list[Problem] = []
    problems += _preset_problems(config)
    problems += _group_problems(config)
    problems += _batch_problems(config)
    problems += backend_problems(config)
    problems += _checkpoint_problems(config)
    problems += _evaluation_problems(config)
    problems += _sft_problems(config)
    return problems


def updates_by_rl(config: RunConfig) -> bool:
    """Whether the run makes RL updates: an evaluation makes none, an SFT run makes supervised ones."""
    return not (config.evaluation.enabled or config.sft.enabled)


def _preset_problems(config: RunConfig) -> list[Problem]:
    if config.preset not in PRESETS:
        choices = ", ".join(PRESETS.names())
        return [("preset", f"unknown preset {config.preset!r}: set preset to one of {choices}")]
    preset = PRESETS.get(config.preset)
    estimator = config.algorithm.estimator
    if preset.use_critic and estimator not in CRITIC_ESTIMATORS:
        return [
            (
                "algorithm.estimator",
                f"preset {preset.name} trains a critic, which only gae and token_gae use: set "
                f"algorithm.estimator to gae or token_gae, or pick a preset without a critic",
            )
        ]
    if not preset.use_critic and estimator in CRITIC_ESTIMATORS:
        with_critic = ", ".join(name for name in PRESETS.names() if PRESETS.get(name).use_critic)
        return [
            (
                "algorithm.estimator",
                f"algorithm.estimator {estimator} needs a critic, which preset {preset.name} does not "
                f"train: set preset to one of {with_critic}, or pick another estimator",
            )
        ]
    return []


def _group_problems(config: RunConfig) -> list[Problem]:
    estimator, n = config.algorithm.estimator, config.rollout.n
    problems: list[Problem] = []
    if not updates_by_rl(config):
        return problems  # no advantage is computed: any k and any temperature will do
    if estimator in GROUP_NEEDS_TWO and n < 2:
        problems.append(("rollout.n", f"rollout.n must be ≥ 2 for {estimator}: set rollout.n to 2 or more"))
    if estimator in GROUP_ESTIMATORS and n >= 2 and config.rollout.temperature == 0:
        problems.append(
            (
                "rollout.temperature",
                f"rollout.temperature is 0, so the {n} samples of a prompt are identical and every "
                f"{estimator} advantage is zero: set rollout.temperature above 0",
            )
        )
    return problems


def _batch_problems(config: RunConfig) -> list[Problem]:
    problems = []
    trajectories = config.trainer.batch_size * config.rollout.n
    mini = config.optim.mini_batch_size
    if trajectories % mini and updates_by_rl(config):  # no RL update, no mini-batch of trajectories
        divisors = ", ".join(str(d) for d in range(1, trajectories + 1) if trajectories % d == 0)
        problems.append(
            (
                "optim.mini_batch_size",
                f"optim.mini_batch_size ({mini}) must divide trainer.batch_size * rollout.n "
                f"({trajectories} trajectories): set optim.mini_batch_size to one of {divisors}",
            )
        )
    if config.rollout.max_new_tokens > config.data.max_response_length:
        problems.append(
            (
                "rollout.max_new_tokens",
                f"rollout.max_new_tokens ({config.rollout.max_new_tokens}) exceeds data.max_response_length "
                f"({config.data.max_response_length}): set rollout.max_new_tokens to at most "
                f"{config.data.max_response_length} or raise data.max_response_length",
            )
        )
    return problems


def backend_problems(config: RunConfig) -> list[Problem]:
    """What the config's backend refuses in it: a field it has no setting for that is not at its
    default, then the values it cannot take (trainer.backend_protocol.Backend)."""
    backend = BACKENDS.get(config.backend)
    defaults = RunConfig.model_construct()  # no validation: this runs inside RunConfig's own
    refused = [
        (path, message)
        for path, message in backend.refused.items()
        if field_value(config, path) != field_value(defaults, path)
    ]
    return refused + backend.problems(config)


def _checkpoint_problems(config: RunConfig) -> list[Problem]:
    trainer = config.trainer
    if trainer.checkpoint_dir:
        return []
    if trainer.resume:
        return [
            (
                "trainer.checkpoint_dir",
                "trainer.resume needs a folder to resume from: set trainer.checkpoint_dir",
            )
        ]
    if trainer.save_every > 0:
        return [
            (
                "trainer.checkpoint_dir",
                "trainer.save_every is set but there is nowhere to save: set trainer.checkpoint_dir "
                "(or set trainer.save_every to 0)",
            )
        ]
    return []


def _evaluation_problems(config: RunConfig) -> list[Problem]:
    evaluation = config.evaluation
    if evaluation.checkpoint and not evaluation.enabled:
        return [
            (
                "evaluation.checkpoint",
                "a checkpoint is only read by an evaluation: set evaluation.enabled to true, or set "
                "evaluation.checkpoint to none",
            )
        ]
    if evaluation.enabled and not config.data.val_path:
        return [("data.val_path", "an evaluation scores the rows of data.val_path: set data.val_path")]
    return []


def _sft_problems(config: RunConfig) -> list[Problem]:
    problems: list[Problem] = []
    if config.sft.enabled and config.evaluation.enabled:
        problems.append(
            ("sft.enabled", "a run either fine-tunes or evaluates: set sft.enabled or evaluation.enabled")
        )
    start = config.start_from
    if start.step is not None and start.run is None:
        problems.append(("start_from.run", "start_from.step names a checkpoint of a run: set start_from.run"))
    if start.optimizer and start.run is None:
        problems.append(
            (
                "start_from.optimizer",
                "the optimiser state is a checkpoint's: set start_from.run, or leave it off",
            )
        )
    if start.optimizer and config.model.lora_rank > 0:
        # A LoRA run that starts from a checkpoint merges it and trains fresh adapters (docs/sft.md#start-from).
        problems.append(
            (
                "start_from.optimizer",
                "a LoRA run trains fresh adapters on the checkpoint's merged weights, which no saved "
                "optimiser state belongs to: set model.lora_rank to 0, or leave start_from.optimizer off",
            )
        )
    return problems


# -- errors for forms, overrides, diffs ----------------------------------------------------------


def validation_errors(error: ValidationError) -> dict[str, list[str]]:
    """A ValidationError of RunConfig as {dotted field path: [messages]} (cross-field ones included)."""
    result: dict[str, list[str]] = {}
    for item in error.errors():
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, CrossFieldError):
            for path, message in cause.problems:
                result.setdefault(path, []).append(message)
            continue
        path = ".".join(str(part) for part in item["loc"]) or "__all__"
        message = unknown_field_message(path) if item["type"] == "extra_forbidden" else item["msg"]
        result.setdefault(path, []).append(message)
    return result


def unknown_field_message(path: str) -> str:
    """What to say of a dotted path that is no field of RunConfig (pydantic's "Extra inputs are not
    permitted"): the known field paths it may mean, and how paths are written (docs/cli.md#field-paths)."""
    known = field_paths()
    leaf = path.rsplit(".", 1)[-1]
    leaves = {candidate: candidate.rsplit(".", 1)[-1] for candidate in known}
    guesses = [candidate for candidate, name in leaves.items() if name == leaf] or difflib.get_close_matches(
        path, known, n=3, cutoff=0.75
    )
    if not guesses:
        near = set(difflib.get_close_matches(leaf, list(leaves.values()), n=3, cutoff=0.75))
        guesses = [candidate for candidate, name in leaves.items() if name in near]
    advice = f"did you mean {' or '.join(guesses)}? " if guesses else ""
    return (
        f"{path!r} is not a field of the config: {advice}A field is named by its dotted path, "
        "section.field (e.g. rollout.tools, optim.lr)"
    )


def config_errors(data: Mapping[str, Any]) -> dict[str, list[str]]:
    """Validate a whole config (as the webapp's form posts it); {} when it is valid."""
    try:
        RunConfig.model_validate(data)
    except ValidationError as error:
        return validation_errors(error)
    return {}


def diff(a: RunConfig, b: RunConfig) -> dict[str, tuple[Any, Any]]:
    """{dotted path: (value in a, value in b)} for every field that differs."""
    left, right = flatten_paths(a.model_dump()), flatten_paths(b.model_dump())
    changed = {}
    for path in left.keys() | right.keys():
        old, new = left.get(path), right.get(path)
        if old != new or _float_sign_differs(old, new):
            changed[path] = (old, new)
    return dict(sorted(changed.items()))


def _float_sign_differs(old: Any, new: Any) -> bool:
    return (
        isinstance(old, float) and isinstance(new, float) and math.copysign(1, old) != math.copysign(1, new)
    )


def field_paths() -> list[str]:
    """Every settable dotted field path of RunConfig, in declaration order."""
    return list(flatten_paths(RunConfig.model_construct().model_dump()))


def flatten_paths(
    data: Mapping[str, Any], model: type[BaseModel] = RunConfig, prefix: str = ""
) -> dict[str, Any]:
    """Nested section mappings (or dotted keys) -> {dotted field path: value}.

    Only sections of ``model`` are walked into; a dict-valued field such as ``rollout.env_kwargs``
    stays one value, so setting it replaces it rather than merging into it.
    """
    flat: dict[str, Any] = {}
    for key, value in data.items():
        head, _, rest = str(key).partition(".")
        section = section_model(model, head)
        if rest:
            if section is None:
                flat[prefix + str(key)] = value  # not a section: validation will name the bad field
            else:
                flat.update(flatten_paths({rest: value}, section, f"{prefix}{head}."))
        elif section is not None and isinstance(value, Mapping):
            flat.update(flatten_paths(value, section, f"{prefix}{head}."))
        else:
            flat[prefix + head] = value
    return flat


def nest_paths(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{dotted path: value} -> nested dicts (the inverse of :func:`flatten_paths`)."""
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        *parents, leaf = path.split(".")
        node = nested
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    return nested


def section_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The section model of field ``name`` of ``model`` (e.g. RolloutConfig for "rollout"), else None."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation
    return None


_section_model = section_model  # the name webapp/experiments/forms.py imports


def field_value(config: RunConfig, path: str) -> Any:
    """The value at a dotted field path (``"model.dtype"``)."""
    return functools.reduce(getattr, path.split("."), config)


def honoured_fields(backend: str) -> frozenset[str]:
    """The field paths ``backend`` honours: every field it does not refuse (Backend.refused)."""
    return frozenset(field_paths()) - BACKENDS.get(backend).refused.keys()
