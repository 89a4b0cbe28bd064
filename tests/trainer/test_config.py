"""RunConfig: presets, cross-field checks with paths, exact JSON round trip, YAML, overrides, diff."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from trainer.algos.advantages import ESTIMATORS
from trainer.algos.losses import AGG_MODES, KL_KINDS, POLICY_LOSSES
from trainer.algos.presets import PRESETS
from trainer.config import (
    RECIPE_DEFAULTS,
    RunConfig,
    config_errors,
    diff,
    field_paths,
    validation_errors,
)
from trainer.config_sections import Estimator, KlKind, LossAggMode, PolicyLoss
from trainer.registry import Registry, RegistryError

# The field names the backend relies on (trainer_spec.md, "RunConfig").
SPEC_FIELDS = """
name task preset backend executor
model.path model.dtype model.trust_remote_code model.gradient_checkpointing
data.train_path data.val_path data.max_prompt_length data.max_response_length data.shuffle data.val_max_samples
rollout.n rollout.temperature rollout.top_p rollout.max_new_tokens rollout.max_steps rollout.agent_name
rollout.context_policy rollout.window rollout.env_type rollout.tools rollout.tool_format rollout.env_kwargs
algorithm.estimator algorithm.policy_loss algorithm.gamma algorithm.lam algorithm.norm_adv_by_std
algorithm.kl_mode algorithm.kl_coef algorithm.kl_kind algorithm.clip_low algorithm.clip_high
algorithm.dual_clip_c algorithm.loss_agg_mode algorithm.entropy_coef algorithm.gigpo_step_weight
algorithm.skip_zero_advantage_groups
optim.lr optim.critic_lr optim.weight_decay optim.grad_clip optim.ppo_epochs optim.mini_batch_size
optim.micro_batch_size optim.warmup_steps
trainer.total_steps trainer.batch_size trainer.seed trainer.val_every trainer.save_every
trainer.checkpoint_dir trainer.resume trainer.device trainer.num_threads
resources.gpus_per_node resources.nodes resources.cpus
report.jsonl_path report.console
""".split()  # noqa: SIM905 - a block of names reads better than a 64-item list


def grpo(**overrides: Any) -> dict[str, Any]:
    """A whole valid grpo config as the webapp's form would post it, with dotted overrides applied."""
    data = RunConfig.from_preset("grpo").model_dump()
    for path, value in overrides.items():
        *parents, leaf = path.split("__")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    return data


# -- shape ------------------------------------------------------------------------------------------


def test_it_has_every_field_the_spec_fixes() -> None:
    assert set(SPEC_FIELDS) <= set(field_paths())


def test_every_field_has_help_text() -> None:
    def walk(model: type[BaseModel], prefix: str) -> list[str]:
        missing = []
        for name, info in model.model_fields.items():
            if not info.description:
                missing.append(prefix + name)
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                missing += walk(annotation, f"{prefix}{name}.")
        return missing

    assert walk(RunConfig, "") == []


@pytest.mark.parametrize(
    ("choices", "registry"),
    [(Estimator, ESTIMATORS), (PolicyLoss, POLICY_LOSSES), (KlKind, KL_KINDS), (LossAggMode, AGG_MODES)],
)
def test_its_choices_are_the_registries_names(choices: Any, registry: Any) -> None:
    assert sorted(typing.get_args(choices)) == registry.names()


def test_the_defaults_are_a_valid_config() -> None:
    config = RunConfig()

    assert config.preset == "grpo" and config.algorithm.estimator == "grpo"
    assert config_errors(config.model_dump()) == {}


def test_it_is_frozen() -> None:
    config = RunConfig()

    with pytest.raises(ValidationError, match="frozen"):
        config.rollout.n = 2  # type: ignore[misc]


# -- presets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS.names())
def test_every_preset_builds_with_its_estimator_loss_and_defaults(name: str) -> None:
    preset = PRESETS.get(name)

    config = RunConfig.from_preset(name)

    assert config.preset == name
    assert config.algorithm.estimator == preset.estimator
    assert config.algorithm.policy_loss == preset.policy_loss
    assert config.algorithm.kl_mode == preset.kl_mode
    assert config.use_critic == preset.use_critic
    flat = config.model_dump()
    for path, value in preset.defaults.items():
        section, field = path.split(".")
        assert flat[section][field] == value, path


def test_overrides_win_over_the_preset_defaults() -> None:
    config = RunConfig.from_preset("grpo", **{"rollout.n": 2, "algorithm.kl_coef": 0.0}, model={"path": "m"})

    assert (config.rollout.n, config.algorithm.kl_coef, config.model.path) == (2, 0.0, "m")
    assert config.model.dtype == "float32"  # a section override only changes the fields it names


def test_a_registered_recipe_sits_between_the_preset_and_the_explicit_values(
    temp_register: Callable[[Registry[Any], str, Any], Any],
) -> None:
    temp_register(
        RECIPE_DEFAULTS, "discounted", {"algorithm.gamma": 0.9, "rollout.max_steps": 7, "rollout.n": 2}
    )

    recipe = RunConfig.from_preset("grpo", task="discounted")
    explicit = RunConfig.from_preset("grpo", task="discounted", **{"algorithm.gamma": 0.5})

    assert (recipe.algorithm.gamma, recipe.rollout.max_steps, recipe.rollout.n) == (
        0.9,
        7,
        2,
    )  # recipe > preset
    assert recipe.algorithm.kl_coef == PRESETS.get("grpo").defaults["algorithm.kl_coef"]  # the rest: preset
    assert (explicit.algorithm.gamma, explicit.rollout.max_steps) == (0.5, 7)  # explicit > recipe
    assert RunConfig.from_preset("grpo", task="my own task").algorithm.gamma == 1.0  # no recipe: preset
    assert (
        RunConfig.from_mapping({"task": "discounted"}).rollout.max_steps == 7
    )  # config files: the same rule


def test_it_rejects_an_unknown_preset_and_lists_the_choices() -> None:
    with pytest.raises(RegistryError, match="choose one of: gigpo, grpo, ppo"):
        RunConfig.from_preset("ppo2")


# -- cross-field checks: each says what to set, on the right field ------------------------------------


@pytest.mark.parametrize(
    ("overrides", "path", "message"),
    [
        ({"rollout__n": 1}, "rollout.n", "rollout.n must be ≥ 2 for grpo: set rollout.n to 2 or more"),
        (
            {"preset": "gigpo", "algorithm__estimator": "gigpo", "rollout__n": 1},
            "rollout.n",
            "rollout.n must be ≥ 2 for gigpo: set rollout.n to 2 or more",
        ),
        (
            {"rollout__temperature": 0.0},
            "rollout.temperature",
            "the 8 samples of a prompt are identical and every grpo advantage is zero: "
            "set rollout.temperature above 0",
        ),
        (
            {"preset": "ppo"},
            "algorithm.estimator",
            "preset ppo trains a critic, which only gae and token_gae use: set algorithm.estimator to gae",
        ),
        (
            {"algorithm__estimator": "gae"},
            "algorithm.estimator",
            "algorithm.estimator gae needs a critic, which preset grpo does not train: "
            "set preset to one of ppo, steppo",
        ),
        ({"preset": "dpo"}, "preset", "unknown preset 'dpo': set preset to one of gigpo, grpo, ppo"),
        (
            {"trainer__batch_size": 3, "rollout__n": 2, "optim__mini_batch_size": 4},
            "optim.mini_batch_size",
            "optim.mini_batch_size (4) must divide trainer.batch_size * rollout.n (6 trajectories): "
            "set optim.mini_batch_size to one of 1, 2, 3, 6",
        ),
        (
            {"rollout__max_new_tokens": 600, "data__max_response_length": 512},
            "rollout.max_new_tokens",
            "rollout.max_new_tokens (600) exceeds data.max_response_length (512): "
            "set rollout.max_new_tokens to at most 512",
        ),
        (
            {"resources__nodes": 2},
            "resources.nodes",
            "backend torch runs in one process: set resources.nodes to 1",
        ),
        (
            {"executor": "ray", "trainer__device": "cuda"},
            "resources.gpus_per_node",
            "set resources.gpus_per_node to 1",
        ),
        (
            {"backend": "verl"},
            "resources.gpus_per_node",
            "backend verl needs GPUs: set resources.gpus_per_node to 1 or more",
        ),
        (
            {"backend": "verl", "resources__gpus_per_node": 3, "rollout__n": 2},
            "trainer.batch_size",
            "verl splits trainer.batch_size * rollout.n (8) across 3 GPUs",
        ),
        ({"trainer__resume": True}, "trainer.checkpoint_dir", "trainer.resume needs a folder to resume from"),
        ({"trainer__save_every": 5}, "trainer.checkpoint_dir", "set trainer.checkpoint_dir"),
    ],
)
def test_each_cross_field_check_names_its_field_and_what_to_set(
    overrides: dict[str, Any], path: str, message: str
) -> None:
    errors = config_errors(grpo(**overrides))

    assert list(errors) == [path]
    assert len(errors[path]) == 1 and message in errors[path][0]


def test_it_reports_every_cross_field_problem_at_once() -> None:
    errors = config_errors(grpo(rollout__n=1, trainer__resume=True))

    assert set(errors) == {"rollout.n", "trainer.checkpoint_dir"}


def test_a_cross_field_error_reads_well_when_raised() -> None:
    with pytest.raises(ValidationError, match=r"set rollout\.n to 2 or more"):
        RunConfig.from_preset("grpo", **{"rollout.n": 1})


def test_a_group_of_one_is_fine_for_rloo() -> None:
    # docs/algorithms.md#rloo: RLOO with n = 1 is defined (A = R), unlike GRPO where it makes every advantage 0.
    assert config_errors(grpo(preset="rloo", algorithm__estimator="rloo", rollout__n=1)) == {}


# -- field errors carry their path ------------------------------------------------------------------


def test_it_rejects_an_unknown_field_with_its_path() -> None:
    data = grpo()
    data["rollout"]["nn"] = 8
    data["colour"] = "blue"

    errors = config_errors(data)

    assert set(errors) == {"rollout.nn", "colour"}
    assert errors["rollout.nn"][0].startswith(
        "'rollout.nn' is not a field of the config: did you mean rollout.n or rollout.window?"
    )
    assert errors["colour"][0].startswith("'colour' is not a field of the config: A field is named by its")


def test_an_unknown_field_names_the_field_path_it_may_mean() -> None:
    """`--set tools=[…]` was refused as "Extra inputs are not permitted": the field is rollout.tools."""
    errors = config_errors({**grpo(), "tools": ["calculator"]})
    assert "did you mean rollout.tools?" in errors["tools"][0]
    assert "section.field" in errors["tools"][0]


def test_it_rejects_out_of_range_values_with_their_paths() -> None:
    errors = config_errors(grpo(rollout__n=0, optim__lr=-1.0, algorithm__kl_mode="sometimes"))

    assert set(errors) == {"rollout.n", "optim.lr", "algorithm.kl_mode"}
    assert "greater than or equal to 1" in errors["rollout.n"][0]
    assert "'loss', 'reward' or 'none'" in errors["algorithm.kl_mode"][0]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_it_rejects_non_finite_numbers(value: float) -> None:
    assert "optim.lr" in config_errors(grpo(optim__lr=value))


def test_validation_errors_maps_a_raised_error_to_paths() -> None:
    with pytest.raises(ValidationError) as raised:
        RunConfig.model_validate(grpo(rollout__n=1, optim__ppo_epochs=0))

    # Field errors come first: the cross-field checks only run on fields that are valid on their own.
    assert list(validation_errors(raised.value)) == ["optim.ppo_epochs"]


# -- JSON and YAML ------------------------------------------------------------------------------------


AWKWARD = {
    "optim.lr": 0.1 + 0.2,  # 0.30000000000000004
    "optim.critic_lr": 5e-324,  # the smallest subnormal
    "algorithm.kl_coef": 1e-300,
    "algorithm.clip_high": 1 / 3,
    "optim.weight_decay": 1e22,
    "algorithm.lam": 1 - 2**-53,
    "algorithm.entropy_coef": 123456789.12345679,
    "algorithm.gigpo_step_weight": 2.5e-308,
    "rollout.env_kwargs": {
        "mix": [0.1, 1e-7, {"deep": 1.7976931348623157e308}],
        "n": 3,
        "s": "ünï ✓",
        "none": None,
    },
    "rollout.tools": ["calculator", "search"],
}


def test_its_json_round_trip_is_exact_even_for_awkward_floats() -> None:
    config = RunConfig.from_preset("grpo", **AWKWARD)

    text = config.to_json()
    again = RunConfig.from_json(text)

    assert again == config
    assert diff(config, again) == {}
    assert again.to_json() == text
    assert "0.30000000000000004" in text
    for path, value in AWKWARD.items():
        section, field = path.split(".")
        assert getattr(getattr(again, section), field) == value
    assert again.optim.critic_lr.hex() == (5e-324).hex()


def test_from_json_restores_exactly_what_was_stored_without_preset_defaults() -> None:
    stored = RunConfig.from_preset(
        "ppo", **{"rollout.n": 3, "algorithm.gamma": 0.9, "optim.mini_batch_size": 3}
    )

    assert RunConfig.from_json(stored.to_json(indent=2)).rollout.n == 3


def test_it_loads_a_yaml_file_over_its_preset(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "name: smoke\n"
        "preset: ppo\n"
        "model:\n  path: /models/tiny\n"
        "rollout:\n  max_steps: 2\n  tools: [calculator]\n  env_kwargs: {tool_timeout_s: 5}\n"
        "optim:\n  lr: 3.0e-6\n"
        "trainer.total_steps: 2\n",
        encoding="utf-8",
    )

    config = RunConfig.from_yaml_file(path, **{"trainer.batch_size": 2, "optim.mini_batch_size": 2})

    assert (config.name, config.preset, config.model.path) == ("smoke", "ppo", "/models/tiny")
    assert config.algorithm.estimator == "gae" and config.use_critic  # from the preset
    assert config.rollout.n == 1  # a preset default
    assert (config.rollout.max_steps, config.rollout.tools) == (2, ["calculator"])
    assert config.rollout.env_kwargs == {"tool_timeout_s": 5}
    assert config.optim.lr == 3e-6
    assert (config.trainer.total_steps, config.trainer.batch_size) == (2, 2)


def test_an_empty_yaml_file_is_the_default_preset(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")

    assert RunConfig.from_yaml_file(path) == RunConfig.from_preset("grpo")


def test_it_rejects_a_yaml_file_that_is_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="mapping of fields, not list"):
        RunConfig.from_yaml("- a\n- b\n")


def test_its_yaml_round_trip_is_exact() -> None:
    config = RunConfig.from_preset("steppo", **AWKWARD)

    assert RunConfig.from_yaml(config.to_yaml()) == config


# -- overrides and diff ------------------------------------------------------------------------------


def test_with_overrides_returns_a_new_config_and_leaves_the_old_one() -> None:
    base = RunConfig.from_preset("grpo", **{"rollout.env_kwargs": {"a": 1, "b": 2}})

    changed = base.with_overrides(**{"rollout.n": 4, "rollout.env_kwargs": {"c": 3}}, name="clone")

    assert (changed.rollout.n, changed.name) == (4, "clone")
    assert changed.rollout.env_kwargs == {"c": 3}  # a dict field is replaced, not merged
    assert (base.rollout.n, base.name, base.rollout.env_kwargs) == (8, "run", {"a": 1, "b": 2})


def test_with_overrides_validates_again() -> None:
    with pytest.raises(ValidationError) as raised:
        RunConfig().with_overrides(**{"rollout.n": 1, "rollout.nope": 1})

    assert set(validation_errors(raised.value)) == {"rollout.nope"}


def test_diff_lists_the_changed_fields_with_old_and_new_values() -> None:
    a = RunConfig.from_preset("grpo")
    b = a.with_overrides(**{"rollout.n": 4, "optim.lr": 2e-6, "rollout.tools": ["search"], "name": "b"})

    assert diff(a, b) == {
        "name": ("run", "b"),
        "optim.lr": (1e-6, 2e-6),
        "rollout.n": (8, 4),
        "rollout.tools": ([], ["search"]),
    }
    assert diff(a, a) == {}
