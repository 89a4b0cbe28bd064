"""Algorithm presets: estimator + policy loss + defaults, as in Agent-R1 (docs/algorithms.md#presets;
defaults per model size: docs/presets.md).

``Preset.defaults`` is keyed by RunConfig's dotted field paths (``"rollout.n"``, ``"algorithm.gamma"``),
so ``RunConfig.from_preset`` can apply them as plain overrides. They are Agent-R1's settings for a
4B model; :meth:`Preset.defaults_for` puts the settings for a small model on top of them when the
run's model is one (docs/presets.md#defaults-by-model-size). Per-task settings (max steps,
HotpotQA's discount) are the task recipes' own (``trainer.config.RECIPE_DEFAULTS``); they win over these.

The presets register in :data:`trainer.config.PRESETS`, which RunConfig's validation asks: the
config sits below them and never imports this module; the ``trainer`` package's ``__init__`` does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, get_args

from trainer.config import PRESETS
from trainer.config_sections import CRITIC_ESTIMATORS, Estimator, KlMode, PolicyLoss, TrainerConfig

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    """One named algorithm: which estimator and policy loss, whether it trains a critic, and defaults."""

    name: str
    estimator: Estimator  # a name in ESTIMATORS (trainer.algos.advantages)
    policy_loss: PolicyLoss  # a name in POLICY_LOSSES (trainer.algos.losses)
    use_critic: bool
    kl_mode: KlMode
    defaults: Mapping[str, Any]  # RunConfig dotted path -> value
    # What it does, in a sentence; a default it names is a placeholder ({n}: rollout.n) that
    # describe() fills from the values in force, so the text never contradicts them.
    description: str

    def __post_init__(self) -> None:
        # Fail at import time, not mid-run, if a preset names something that is not registered (these
        # are the registries' names: tests/trainer/test_config.py checks).
        for field, names in (("estimator", Estimator), ("policy_loss", PolicyLoss), ("kl_mode", KlMode)):
            value = getattr(self, field)
            if value not in get_args(names):
                raise ValueError(
                    f"preset {self.name!r}: {field} must be one of {get_args(names)}, not {value!r}"
                )
        if self.use_critic != (self.estimator in CRITIC_ESTIMATORS):
            raise ValueError(
                f"preset {self.name!r}: use_critic must be True exactly when the estimator reads critic "
                f"values ({', '.join(sorted(CRITIC_ESTIMATORS))}); estimator is {self.estimator!r}"
            )
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        self.describe()  # a placeholder describe() cannot fill fails here, at import time

    def describe(self, values: Mapping[str, Any] | None = None) -> str:
        """The description with the defaults it names taken from ``values`` (a run's dotted-path
        values, e.g. :meth:`defaults_for` a small model's) or, without, from the preset's own."""
        values = self.defaults if values is None else values
        return self.description.format(n=values.get("rollout.n", self.group_size))

    @property
    def group_size(self) -> int:
        return int(self.defaults.get("rollout.n", 1))

    def defaults_for(self, parameters: int | None, honoured: Collection[str]) -> dict[str, Any]:
        """The preset's defaults for a model of ``parameters`` parameters (None: unknown, the plain
        defaults), keeping only what the run's backend honours of the small-model settings."""
        defaults = dict(self.defaults)
        if parameters is not None and parameters <= SMALL_MODEL_MAX_PARAMETERS:
            small = small_model_defaults(self)
            defaults.update({path: value for path, value in small.items() if path in honoured})
        return defaults


# Up to here a model counts as small (SmolLM2-135M and -360M, the tiny test models): it trains on a
# laptop's CPU, in small batches and for tens of steps, where Agent-R1's 4B settings barely move it.
SMALL_MODEL_MAX_PARAMETERS = 500_000_000
# Twenty times the 4B rate. On the demo (SmolLM2-135M, 10 minutes on two cores) 1e-5 moved the reward
# by about +0.1 and 3e-5 traded correctness for the format bonus (docs/presets.md#defaults-by-model-size).
SMALL_MODEL_LR = 2e-5


def small_model_defaults(preset: Preset) -> dict[str, Any]:
    """What a small model trains with (docs/presets.md#defaults-by-model-size): a larger learning rate
    than a 4B model's, the whole batch as one on-policy mini-batch (no separate π_old pass), 8 rows
    per forward pass, and no update for groups whose rewards are all equal."""
    return {
        "optim.lr": SMALL_MODEL_LR,
        "optim.critic_lr": 1e-4,
        # trainer.batch_size's default prompts times n samples each
        "optim.mini_batch_size": TrainerConfig.model_fields["batch_size"].default * preset.group_size,
        "optim.micro_batch_size": 8,
        "algorithm.skip_zero_advantage_groups": True,
    }


# Agent-R1's recipe (Qwen3-4B-Instruct): actor lr 1e-6, critic lr 1e-5, no entropy bonus, gamma 1, and
# KL coefficient 0.001 whether it is a loss or a reward penalty.
_COMMON: dict[str, Any] = {
    "optim.lr": 1e-6,
    "optim.critic_lr": 1e-5,
    "algorithm.entropy_coef": 0.0,
    "algorithm.gamma": 1.0,
    "algorithm.lam": 1.0,
    "algorithm.norm_adv_by_std": True,
    "algorithm.kl_coef": 0.001,
    "algorithm.kl_kind": "low_var_kl",
    "algorithm.clip_low": 0.2,
    "algorithm.clip_high": 0.2,
    "algorithm.dual_clip_c": 3.0,
    "algorithm.loss_agg_mode": "token-mean",
}
# KL in the reward is a per-token shaping term; k1 is the estimator whose expectation is the KL itself.
_KL_IN_REWARD: dict[str, Any] = {"algorithm.kl_kind": "kl"}


def _add(preset: Preset) -> None:
    PRESETS.add(preset.name, preset)


_add(
    Preset(
        name="ppo",
        estimator="gae",
        policy_loss="vanilla",
        use_critic=True,
        kl_mode="none",
        defaults={**_COMMON, "rollout.n": 1},
        description="PPO with a critic: step-level GAE (one value per step) and the dual-clip PPO loss.",
    )
)
_add(
    Preset(
        name="steppo",
        estimator="gae",
        policy_loss="gspo",
        use_critic=True,
        kl_mode="none",
        defaults={
            **_COMMON,
            "rollout.n": 1,
            "algorithm.loss_agg_mode": "seq-mean-token-mean",
            # A length-normalised sequence ratio stays close to 1: GSPO's paper clips at 3e-4 / 4e-4.
            "algorithm.clip_low": 3e-4,
            "algorithm.clip_high": 4e-4,
        },
        description=(
            "StepPO: step-level GAE with a critic and one importance ratio per step "
            "(GSPO loss, seq-mean-token-mean)."
        ),
    )
)
_add(
    Preset(
        name="grpo",
        estimator="grpo",
        policy_loss="vanilla",
        use_critic=False,
        kl_mode="loss",
        defaults={**_COMMON, "rollout.n": 8},
        description="GRPO: outcome advantage normalised over the n = {n} samples of a prompt; KL as a loss.",
    )
)
_add(
    Preset(
        name="rloo",
        estimator="rloo",
        policy_loss="vanilla",
        use_critic=False,
        kl_mode="reward",
        defaults={**_COMMON, **_KL_IN_REWARD, "rollout.n": 8},
        description="RLOO: leave-one-out baseline over the n = {n} samples of a prompt; KL as a reward penalty.",
    )
)
_add(
    Preset(
        name="reinforce",
        estimator="reinforce",
        policy_loss="reinforce",
        use_critic=False,
        kl_mode="reward",
        defaults={**_COMMON, **_KL_IN_REWARD, "rollout.n": 1},
        description="REINFORCE: whitened discounted return per step, plain policy gradient; KL in reward.",
    )
)
_add(
    Preset(
        name="gigpo",
        estimator="gigpo",
        policy_loss="vanilla",
        use_critic=False,
        kl_mode="loss",
        defaults={**_COMMON, "rollout.n": 8, "algorithm.gigpo_step_weight": 1.0},
        description=(
            "GiGPO: episode-level group advantage plus a step-level advantage among steps that share "
            "an anchor observation; dual-clip PPO loss, KL as a loss."
        ),
    )
)
