"""Presets: the mapping of docs/algorithms.md#presets, their defaults and registry behaviour."""

from __future__ import annotations

import pytest

from trainer.algos.advantages import ESTIMATORS
from trainer.algos.losses import AGG_MODES, KL_KINDS, POLICY_LOSSES
from trainer.algos.presets import PRESETS, SMALL_MODEL_LR, SMALL_MODEL_MAX_PARAMETERS, Preset
from trainer.registry import RegistryError

# docs/algorithms.md#presets: name -> (estimator, policy loss, critic, where the KL goes).
EXPECTED = {
    "ppo": ("gae", "vanilla", True, "none"),
    "steppo": ("gae", "gspo", True, "none"),
    "grpo": ("grpo", "vanilla", False, "loss"),
    "rloo": ("rloo", "vanilla", False, "reward"),
    "reinforce": ("reinforce", "reinforce", False, "reward"),
    "gigpo": ("gigpo", "vanilla", False, "loss"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_preset_maps_to_its_estimator_loss_critic_and_kl_mode(name: str) -> None:
    preset = PRESETS.get(name)
    assert (preset.estimator, preset.policy_loss, preset.use_critic, preset.kl_mode) == EXPECTED[name]
    assert preset.name == name and preset.description


def test_the_registry_holds_exactly_the_six_presets() -> None:
    assert PRESETS.names() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_defaults_follow_agent_r1(name: str) -> None:
    defaults = PRESETS.get(name).defaults
    assert defaults["optim.lr"] == 1e-6
    assert defaults["optim.critic_lr"] == 1e-5
    assert defaults["algorithm.entropy_coef"] == 0.0
    assert defaults["algorithm.gamma"] == 1.0
    assert defaults["algorithm.kl_coef"] == 0.001


def test_group_presets_sample_eight_per_prompt() -> None:
    for name in ("grpo", "rloo", "gigpo"):
        assert PRESETS.get(name).defaults["rollout.n"] == 8


def test_a_description_names_the_group_size_of_the_values_in_force() -> None:
    grpo = PRESETS.get("grpo")
    assert "n = 8 samples" in grpo.describe()  # the preset's own defaults (a 4B model)
    assert "n = 4 samples" in grpo.describe({"rollout.n": 4})  # a user's own n
    small = grpo.defaults_for(SMALL_MODEL_MAX_PARAMETERS, {"rollout.n", "optim.lr"})
    assert "n = 8 samples" in grpo.describe(small)  # a small model keeps the preset's group
    assert all("{" not in PRESETS.get(name).describe() for name in PRESETS.names())


def test_kl_goes_in_the_loss_as_low_var_kl_and_in_the_reward_as_k1() -> None:
    assert PRESETS.get("grpo").defaults["algorithm.kl_kind"] == "low_var_kl"
    assert PRESETS.get("rloo").defaults["algorithm.kl_kind"] == "kl"
    assert PRESETS.get("reinforce").defaults["algorithm.kl_kind"] == "kl"


def test_steppo_aggregates_per_step_with_gspos_clip_range() -> None:
    defaults = PRESETS.get("steppo").defaults
    assert defaults["algorithm.loss_agg_mode"] == "seq-mean-token-mean"
    assert (defaults["algorithm.clip_low"], defaults["algorithm.clip_high"]) == (3e-4, 4e-4)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_defaults_name_real_registry_entries(name: str) -> None:
    defaults = PRESETS.get(name).defaults
    assert defaults["algorithm.loss_agg_mode"] in AGG_MODES
    assert defaults["algorithm.kl_kind"] in KL_KINDS
    assert PRESETS.get(name).estimator in ESTIMATORS
    assert PRESETS.get(name).policy_loss in POLICY_LOSSES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_run_config_accepts_every_preset_and_its_defaults(name: str) -> None:
    # The defaults are keyed by RunConfig's dotted paths; RunConfig forbids unknown fields.
    from trainer.config import RunConfig

    config = RunConfig.from_preset(name, **PRESETS.get(name).defaults)
    assert config.algorithm.estimator == PRESETS.get(name).estimator
    assert config.algorithm.policy_loss == PRESETS.get(name).policy_loss
    assert config.algorithm.kl_mode == PRESETS.get(name).kl_mode
    assert config.rollout.n == PRESETS.get(name).defaults["rollout.n"]


def test_preset_defaults_cannot_be_mutated() -> None:
    with pytest.raises(TypeError):
        PRESETS.get("grpo").defaults["rollout.n"] = 1  # type: ignore[index]


def test_an_unknown_preset_lists_the_choices() -> None:
    with pytest.raises(RegistryError, match="gigpo, grpo, ppo, reinforce, rloo, steppo"):
        PRESETS.get("dapo")


def test_a_duplicate_preset_is_rejected() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        PRESETS.add("grpo", PRESETS.get("rloo"))
    assert PRESETS.get("grpo").estimator == "grpo"


def test_a_preset_naming_an_unregistered_estimator_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"estimator must be one of .*'grpo'.*not 'dapo'"):
        Preset("x", "dapo", "vanilla", False, "none", {}, "")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"policy_loss must be one of .*'vanilla'.*not 'cispo'"):
        Preset("x", "grpo", "cispo", False, "none", {}, "")  # type: ignore[arg-type]


def test_a_preset_whose_critic_does_not_fit_its_estimator_is_rejected() -> None:
    with pytest.raises(ValueError, match="use_critic"):
        Preset("x", "grpo", "vanilla", True, "loss", {}, "")
    with pytest.raises(ValueError, match="use_critic"):
        Preset("x", "gae", "vanilla", False, "loss", {}, "")
    with pytest.raises(ValueError, match="kl_mode"):
        Preset("x", "grpo", "vanilla", False, "both", {}, "")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_small_model_gets_the_small_model_settings_and_a_large_one_agent_r1s(name: str) -> None:
    from trainer.config import RunConfig

    small = RunConfig.from_preset(name, **{"model.path": "smollm2-135m-instruct"})
    large = RunConfig.from_preset(name, **{"model.path": "Qwen/Qwen3-4B-Instruct-2507"})
    group = PRESETS.get(name).group_size
    assert (small.optim.lr, small.rollout.n) == (SMALL_MODEL_LR, group)
    assert small.algorithm.skip_zero_advantage_groups
    assert small.optim.mini_batch_size == small.trainer.batch_size * small.rollout.n  # one on-policy pass
    assert (large.optim.lr, large.rollout.n) == (1e-6, group)


def test_the_users_values_win_over_the_small_model_settings() -> None:
    from trainer.config import RunConfig

    config = RunConfig.from_preset("grpo", **{"model.path": "smollm2-135m-instruct", "optim.lr": 3e-6})
    assert config.optim.lr == 3e-6 and config.rollout.n == 8
