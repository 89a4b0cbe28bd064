"""RL math for the step-level MDP: advantage estimators, policy/value losses and algorithm presets.

Everything here is a pure tensor function (tensors in, tensors out) registered in one registry per kind:
``ESTIMATORS`` (advantages), ``POLICY_LOSSES`` and ``PRESETS``.
"""

from __future__ import annotations

from trainer.algos.advantages import ESTIMATORS, AdvantageEstimator, StepBatch
from trainer.algos.losses import (
    AGG_MODES,
    KL_KINDS,
    POLICY_LOSSES,
    PolicyLoss,
    agg_loss,
    apply_kl_in_reward,
    entropy_from_logits,
    kl_penalty,
    masked_mean,
    value_loss,
)
from trainer.algos.presets import PRESETS, Preset

__all__ = [
    "AGG_MODES",
    "ESTIMATORS",
    "KL_KINDS",
    "POLICY_LOSSES",
    "PRESETS",
    "AdvantageEstimator",
    "PolicyLoss",
    "Preset",
    "StepBatch",
    "agg_loss",
    "apply_kl_in_reward",
    "entropy_from_logits",
    "kl_penalty",
    "masked_mean",
    "value_loss",
]
