"""The names of the algos registries and what kind each estimator is, spelled out so that RunConfig,
the presets and the web app need neither torch nor the registries (docs/algorithms.md).

tests/trainer/test_config.py checks that these names match the registries exactly.
"""

from __future__ import annotations

from typing import Literal

Estimator = Literal["gae", "token_gae", "grpo", "rloo", "reinforce", "gigpo"]
PolicyLoss = Literal["vanilla", "gspo", "reinforce"]
KlKind = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
KlMode = Literal["loss", "reward", "none"]  # where the KL to the reference goes

CRITIC_ESTIMATORS = frozenset({"gae", "token_gae"})
# Estimators that compare steps sharing an anchor observation (StepBatch.anchor_index).
ANCHOR_ESTIMATORS = frozenset({"gigpo"})
# Estimators whose baseline comes from the other samples of the same prompt
# (docs/algorithms.md#advantage-estimators).
GROUP_ESTIMATORS = frozenset({"grpo", "rloo", "gigpo"})
# Of those, the ones for which one sample per prompt makes every advantage zero (a size-1 group).
GROUP_NEEDS_TWO = frozenset({"grpo", "gigpo"})
