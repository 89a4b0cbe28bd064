"""RunConfig: the one source of truth for a run.

The webapp stores exactly this object as JSON, the trainer fetches it back, and the CLI loads it
from YAML. It is frozen (a run's config never changes under it), rejects unknown fields (a typo
must not silently fall back to a default), and its cross-field checks say what to set instead.

Field paths are dotted (``rollout.n``); the same paths key overrides (``--set rollout.n=8``),
preset defaults, :func:`config_errors` (so the webapp can put a message on the right form field)
and :func:`diff` (the clone page).

Defaults come in one order, :meth:`RunConfig.from_preset`'s: the preset's, then the task recipe's
(:data:`RECIPE_DEFAULTS`, which recipe plugins fill), then the caller's explicit values. The
New-experiment form, the REST API, the CLI and config files all build configs through it.

Each backend (:data:`trainer.backends.BACKENDS`) refuses what it cannot honour; RunConfig's
validation asks the config's backend and puts its messages on the fields.

Importing this module needs no torch. Validating a config reads the presets
(``trainer.algos.presets``), which today pulls in torch through the ``trainer.algos`` package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from trainer.backends import BACKENDS
from trainer.registry import Registry

DEFAULT_PRESET = "grpo"
# Names model.path may hold instead of a folder: models trainer.models provides offline.
SMOLLM2_ALIASES = frozenset({"smollm2", "smollm2-135m-instruct", "SmolLM2-135M-Instruct"})
TINY_TEST_ALIAS = "tiny-test"  # a tiny random model with SmolLM2's tokenizer: smoke runs in seconds
OFFLINE_MODELS = SMOLLM2_ALIASES | {TINY_TEST_ALIAS}

# Per-task RunConfig defaults (dotted path -> value), registered by each task recipe under its task
# name when the recipe's plugin is imported (trainer.plugins); the trainer keeps no task table.
RECIPE_DEFAULTS: Registry[Mapping[str, Any]] = Registry("task recipe")

if TYPE_CHECKING:
    BackendName = str
else:  # the registry's names, so a backend added there is a valid choice here and in the form
    BackendName = Literal[tuple(BACKENDS.names())]

# The names of the algos registries, spelled out here so that validating a config needs neither
# torch nor the registries; tests/trainer/test_config.py checks they match the registries.
Estimator = Literal["gae", "token_gae", "grpo", "rloo", "reinforce", "gigpo"]
PolicyLoss = Literal["vanilla", "gspo", "reinforce"]
KlKind = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]

CRITIC_ESTIMATORS = frozenset({"gae", "token_gae"})
# Estimators that compare steps sharing an anchor observation (StepBatch.anchor_index).
ANCHOR_ESTIMATORS = frozenset({"gigpo"})
# Estimators whose baseline comes from the other samples of the same prompt
# (docs/algorithms.md#advantage-estimators).
GROUP_ESTIMATORS = frozenset({"grpo", "rloo", "gigpo"})
# Of those, the ones for which one sample per prompt makes every advantage zero (a size-1 group).
GROUP_NEEDS_TWO = frozenset({"grpo", "gigpo"})


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)


class ModelConfig(_Section):
    path: str = Field(
        default="",
        description="Local Hugging Face model folder (or a name the backend resolves offline) to train.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        default="float32",
        description="Dtype the policy, reference and critic weights are held and computed in; with "
        "bfloat16 the optimizer keeps fp32 master copies of the trained weights.",
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow the model folder's own Python code to run when loading it."
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass to save memory."
    )
    lora_rank: int = Field(
        default=0,
        ge=0,
        description="Train low-rank adapters of this rank on every linear layer instead of all the weights "
        "(0 trains every weight). Adapters learn with a larger optim.lr, about ten times full fine-tuning's.",
    )
    lora_alpha: int = Field(
        default=16,
        ge=1,
        description="LoRA scaling: the adapters' update is multiplied by lora_alpha / lora_rank.",
    )


class DataConfig(_Section):
    train_path: str = Field(
        default="",
        description="Parquet file of training rows (the data contract). Webapp runs replace it with "
        "the dataset downloaded for the run.",
    )
    val_path: str | None = Field(
        default=None, description="Parquet file of validation rows; none disables validation."
    )
    max_prompt_length: int = Field(
        default=1024,
        ge=1,
        description="Longest prompt in tokens; a step whose prompt is longer ends the episode.",
    )
    max_response_length: int = Field(
        default=512,
        ge=1,
        description="A trajectory's response budget: the most model tokens it generates over all its "
        "steps (the episode ends when it is spent). verl counts the tool and env tokens between turns too.",
    )
    shuffle: bool = Field(default=True, description="Shuffle the training rows every epoch (seeded).")
    val_max_samples: int | None = Field(
        default=None, ge=1, description="Validate on at most this many rows; none uses the whole split."
    )
    rewards: dict[str, str] = Field(
        default_factory=dict,
        description="data_source → reward function for this run (built in or the team's), ahead of the "
        "routing table: the datasets' mappings, frozen when the experiment is made.",
    )


class RolloutConfig(_Section):
    n: int = Field(default=4, ge=1, description="Trajectories sampled per prompt (the group size).")
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature; 0 decodes greedily.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(
        default=128, ge=1, description="Most tokens generated in one step (one LLM call)."
    )
    max_steps: int = Field(default=5, ge=1, description="Most LLM calls (steps) in one trajectory.")
    agent_name: str = Field(
        default="agent_env_loop",
        min_length=1,
        description="Flow that runs rows without an agent_name column (the FLOWS registry).",
    )
    context_policy: Literal["append", "sliding_window"] = Field(
        default="append", description="How the next prompt is rebuilt from the history each step."
    )
    window: int = Field(
        default=4, ge=1, description="Most recent steps the sliding_window context policy keeps."
    )
    env_type: str = Field(
        default="tool", min_length=1, description="Environment for rows whose env_kwargs name none (ENVS)."
    )
    tools: list[str] = Field(default_factory=list, description="Tools offered to the agent (TOOLS registry).")
    tool_format: str = Field(
        default="hermes", min_length=1, description="How tool calls are written and parsed (FORMATS)."
    )
    env_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Default environment settings; a row's env_kwargs override them."
    )


class AlgorithmConfig(_Section):
    estimator: Estimator = Field(
        default="grpo", description="Advantage estimator (docs/algorithms.md#advantage-estimators)."
    )
    policy_loss: PolicyLoss = Field(
        default="vanilla", description="Policy loss (docs/algorithms.md#policy-losses)."
    )
    gamma: float = Field(default=1.0, ge=0.0, le=1.0, description="Discount factor between steps.")
    lam: float = Field(default=1.0, ge=0.0, le=1.0, description="GAE lambda.")
    norm_adv_by_std: bool = Field(
        default=True, description="Divide group advantages by the group's std (false gives Dr.GRPO)."
    )
    kl_mode: Literal["loss", "reward", "none"] = Field(
        default="loss",
        description="Where the KL to the reference model goes: a loss term, the reward, or nowhere.",
    )
    kl_coef: float = Field(default=0.001, ge=0.0, description="Weight of the KL term.")
    kl_kind: KlKind = Field(
        default="low_var_kl", description="KL estimator (k1, k2 = mse, k3 = low_var_kl, abs)."
    )
    clip_low: float = Field(default=0.2, ge=0.0, lt=1.0, description="PPO ratio clip below: 1 - clip_low.")
    clip_high: float = Field(default=0.2, ge=0.0, description="PPO ratio clip above: 1 + clip_high.")
    dual_clip_c: float = Field(
        default=3.0, gt=1.0, description="Dual-clip bound on the loss for negative advantages."
    )
    loss_agg_mode: LossAggMode = Field(
        default="token-mean", description="How per-token losses are averaged into one number."
    )
    entropy_coef: float = Field(default=0.0, ge=0.0, description="Weight of the entropy bonus.")
    gigpo_step_weight: float = Field(
        default=1.0, ge=0.0, description="GiGPO: weight of the step-level (anchor group) advantage."
    )
    skip_zero_advantage_groups: bool = Field(
        default=False,
        description="Leave out of the actor update the groups whose advantages are all zero: their "
        "forward and backward passes are saved, and the loss is averaged over the other groups only.",
    )


class OptimConfig(_Section):
    lr: float = Field(default=1e-6, gt=0.0, description="Actor learning rate (AdamW).")
    critic_lr: float = Field(default=1e-5, gt=0.0, description="Critic learning rate (AdamW).")
    weight_decay: float = Field(default=0.01, ge=0.0, description="AdamW weight decay.")
    grad_clip: float = Field(default=1.0, gt=0.0, description="Clip the gradient's global norm to this.")
    ppo_epochs: int = Field(default=1, ge=1, description="Passes over each rollout batch.")
    mini_batch_size: int = Field(
        default=4, ge=1, description="Trajectories per optimizer step; a trajectory's steps are never split."
    )
    micro_batch_size: int = Field(
        default=4, ge=1, description="Step rows per forward/backward pass (gradient accumulation)."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Linear learning-rate warmup, in training steps.")


class TrainerConfig(_Section):
    total_steps: int = Field(
        default=10, ge=1, description="Training steps (one rollout batch + update each)."
    )
    batch_size: int = Field(default=4, ge=1, description="Prompts per training step.")
    seed: int = Field(default=42, description="Seed for data order, sampling and initialisation.")
    val_every: int = Field(
        default=0, ge=0, description="Validate every N steps and at the end (0 = only at the end)."
    )
    save_every: int = Field(
        default=0, ge=0, description="Checkpoint every N steps and at the end (0 = only at the end)."
    )
    checkpoint_dir: str | None = Field(
        default=None, description="Folder for Hugging Face format checkpoints; none saves nothing."
    )
    resume: bool = Field(
        default=False,
        description="Make the run resumable: checkpoints also hold the optimizer and RNG state, and the run "
        "continues from the latest checkpoint in checkpoint_dir when there is one. Off, checkpoints hold "
        "the weights only (about a third of the size).",
    )
    keep_checkpoints: int | None = Field(
        default=None,
        ge=1,
        description="Keep only the newest k checkpoints: an older one is deleted once a newer one is "
        "complete. None keeps every checkpoint.",
    )
    device: Literal["cpu", "cuda", "auto"] = Field(
        default="auto", description="Where the torch backend runs; auto picks cuda when available."
    )
    num_threads: int | None = Field(
        default=None, ge=1, description="torch CPU threads; none leaves torch's default."
    )


class EvaluationConfig(_Section):
    """An evaluation run: the model scored on a split with k samples per prompt, no update
    (docs/evaluations.md)."""

    enabled: bool = Field(
        default=False,
        description="Evaluate instead of training: rollout.n samples of every row of data.val_path "
        "(at most data.val_max_samples rows), scored, with no update; reports eval/... metrics.",
    )
    checkpoint: str | None = Field(
        default=None,
        description="A checkpoint folder (step_*) whose policy/ weights are evaluated; none evaluates "
        "model.path itself.",
    )


class ResourcesConfig(_Section):
    gpus_per_node: int = Field(default=0, ge=0, description="GPUs the run needs on each node.")
    nodes: int = Field(default=1, ge=1, description="Nodes the run spans (verl backend only).")
    cpus: int = Field(default=2, ge=1, description="CPUs the run needs (the Ray job's entrypoint_num_cpus).")


class ReportConfig(_Section):
    jsonl_path: str | None = Field(
        default=None, description="Append every metric, trajectory and status as JSON lines to this file."
    )
    console: bool = Field(
        default=True, description="Log metrics to the console (and a progress bar on a TTY)."
    )
    token_signals: Literal["all", "sample", "none"] | None = Field(
        default=None,
        description="Which trajectories keep their per-token signals (advantage, log-prob, ratio, entropy, "
        "clipped, KL) for the trajectory page: all, a sample of report.token_signals_per_step each step, or "
        "none (None: a sample). Backend verl records advantage, log-prob, entropy and KL, not the ratio "
        "and clip of its update (docs/verl.md#token-signals).",
    )
    token_signals_per_step: int = Field(
        default=4, ge=1, description="Trajectories per step that keep their per-token signals when sampling."
    )


class RunConfig(_Section):
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
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy model.")
    data: DataConfig = Field(default_factory=DataConfig, description="Datasets and length limits.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Sampling and the agent loop.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Estimator, loss and KL.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser and batch sizes.")
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="Loop length, seeds, checkpoints."
    )
    resources: ResourcesConfig = Field(
        default_factory=ResourcesConfig, description="What the run asks the cluster for."
    )
    evaluation: EvaluationConfig = Field(
        default_factory=EvaluationConfig, description="Evaluate a model or checkpoint instead of training."
    )
    report: ReportConfig = Field(
        default_factory=ReportConfig, description="Where results go besides the webapp."
    )

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
        size of the model ``model.path`` names, see Preset.defaults_for), then the recipe's defaults of the ``task`` the overrides name (:data:`RECIPE_DEFAULTS`), then the
        overrides, the caller's explicit values.

        Overrides are keyed by dotted path (``**{"rollout.n": 8}``) or by section
        (``model={"path": ...}``); either way only the named fields change. A task no recipe has
        registered (its plugin not loaded, or free text) adds nothing.
        """
        from trainer.algos.presets import PRESETS
        from trainer.models import parameter_count

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
            values.update(preset.defaults_for(parameters, BACKENDS.get(backend).honoured))
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

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(message for _, message in problems))


def cross_field_problems(config: RunConfig) -> list[tuple[str, str]]:
    """Every cross-field problem as (field path, message saying what to set)."""
    problems: list[tuple[str, str]] = []
    problems += _preset_problems(config)
    problems += _group_problems(config)
    problems += _batch_problems(config)
    problems += _backend_problems(config)
    problems += _checkpoint_problems(config)
    problems += _evaluation_problems(config)
    return problems


def _preset_problems(config: RunConfig) -> list[tuple[str, str]]:
    from trainer.algos.presets import PRESETS

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


def _group_problems(config: RunConfig) -> list[tuple[str, str]]:
    estimator, n = config.algorithm.estimator, config.rollout.n
    problems: list[tuple[str, str]] = []
    if config.evaluation.enabled:
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


def _batch_problems(config: RunConfig) -> list[tuple[str, str]]:
    problems = []
    trajectories = config.trainer.batch_size * config.rollout.n
    mini = config.optim.mini_batch_size
    if trajectories % mini and not config.evaluation.enabled:  # an evaluation makes no update
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


def _backend_problems(config: RunConfig) -> list[tuple[str, str]]:
    """What the config's backend refuses in it (see trainer.backends.base.Backend.problems)."""
    return BACKENDS.get(config.backend).problems(config)


def _checkpoint_problems(config: RunConfig) -> list[tuple[str, str]]:
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


def _evaluation_problems(config: RunConfig) -> list[tuple[str, str]]:
    evaluation = config.evaluation
    if evaluation.checkpoint and not evaluation.enabled:
        return [("evaluation.checkpoint", "a checkpoint is only read by an evaluation: set evaluation.enabled "
                 "to true, or set evaluation.checkpoint to none")]  # fmt: skip
    if evaluation.enabled and not config.data.val_path:
        return [("data.val_path", "an evaluation scores the rows of data.val_path: set data.val_path")]
    return []


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
        result.setdefault(path, []).append(item["msg"])
    return result


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
    if isinstance(annotation, type) and issubclass(annotation, _Section):
        return annotation
    return None


_section_model = section_model  # the name webapp/experiments/forms.py imports
