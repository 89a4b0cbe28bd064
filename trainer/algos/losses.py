"""Policy and value losses, loss aggregation, KL penalties and entropy (docs/algorithms.md#policy-losses).

Pure tensor functions. Shapes: S rows (steps), T response positions; ``mask`` is 1 on model tokens.
Every policy loss has the same signature (:class:`PolicyLoss`): the tensors in a :class:`LossInputs`, the
clip ranges and aggregation in a :class:`LossParams`; it returns ``(loss, metrics)`` where the metrics are
detached scalar tensors and always include ``clipfrac`` and ``ppo_kl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from trainer.config_sections import AlgorithmConfig
from trainer.registry import Registry

__all__ = [
    "AGG_MODES",
    "KL_KINDS",
    "POLICY_LOSSES",
    "LossInputs",
    "LossParams",
    "PolicyLoss",
    "agg_loss",
    "entropy_from_logits",
    "kl_penalty",
    "loss_params",
    "masked_mean",
    "value_loss",
]

# Bound on |log pi - log pi_old| before exp(): one stale token must not overflow the ratio (as in verl).
_LOG_RATIO_CLAMP = 20.0
# GSPO's combined log-ratio is clamped from above only, as in verl's compute_policy_loss_gspo.
_GSPO_LOG_RATIO_MAX = 10.0


def _on_mask(x: Tensor, mask: Tensor) -> Tensor:
    """x where mask is 1, else 0. A select, not a product: inf or NaN on padding (a log-prob of a pad
    token, say) must not turn the sum into NaN, nor send NaN gradients back."""
    return torch.where(mask > 0, x, torch.zeros_like(x))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over the entries where mask (0/1) is 1; 0 when the mask is empty."""
    return _on_mask(x, mask).sum() / (mask > 0).sum().clamp(min=1).to(x.dtype)


# ------------------------------------------------------------------------------------------ aggregation

AggFn = Callable[[Tensor, Tensor], Tensor]
AGG_MODES: Registry[AggFn] = Registry("loss aggregation mode")


@AGG_MODES.register("token-mean")
def _token_mean(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Every response token in the batch weighs the same: sum(l * m) / sum(m)."""
    return masked_mean(loss_mat, mask)


def _seq_mean(per_seq: Tensor, mask: Tensor) -> Tensor:
    """Mean over the rows that hold at least one response token (empty rows do not dilute it)."""
    has_tokens = (mask > 0).any(-1)
    return _on_mask(per_seq, has_tokens).sum() / has_tokens.sum().clamp(min=1).to(per_seq.dtype)


@AGG_MODES.register("seq-mean-token-sum")
def _seq_mean_token_sum(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Sum over each row's tokens, then mean over rows (the classic REINFORCE sequence loss)."""
    return _seq_mean(_on_mask(loss_mat, mask).sum(-1), mask)


@AGG_MODES.register("seq-mean-token-mean")
def _seq_mean_token_mean(loss_mat: Tensor, mask: Tensor) -> Tensor:
    """Mean over each row's tokens, then mean over rows: every step weighs the same (GSPO)."""
    lengths = (mask > 0).sum(-1).clamp(min=1).to(loss_mat.dtype)
    return _seq_mean(_on_mask(loss_mat, mask).sum(-1) / lengths, mask)


def agg_loss(loss_mat: Tensor, mask: Tensor, mode: str = "token-mean") -> Tensor:
    """Aggregate a [S, T] loss matrix to a scalar over the tokens where mask (0/1) is 1.

    token-mean: sum(l * m) / sum(m); seq-mean-token-sum: mean over rows of sum_t l * m;
    seq-mean-token-mean: mean over rows of (sum_t l * m / sum_t m). Rows without tokens are left out,
    and an all-zero mask gives 0 (not NaN). Unknown modes raise RegistryError listing the choices.
    """
    return AGG_MODES.get(mode)(loss_mat, mask)


# -------------------------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class LossInputs:
    """The tensors of one policy-loss call, all [S, T]; ``token_out``, when given, receives the per-token
    ratio and whether the clipped term was taken (the trajectory page's token view,
    docs/rollouts.md#token-signals)."""

    log_prob: Tensor
    old_log_prob: Tensor
    advantages: Tensor
    response_mask: Tensor
    token_out: dict[str, Tensor] | None = None


@dataclass(frozen=True)
class LossParams:
    """The algorithm settings a policy loss reads (algorithm.clip_low, clip_high, dual_clip_c, loss_agg_mode)."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float = 3.0
    agg_mode: str = "token-mean"


DEFAULT_LOSS_PARAMS = LossParams()
LossResult = tuple[Tensor, dict[str, Tensor]]


def loss_params(algorithm: AlgorithmConfig) -> LossParams:
    """The LossParams of a run's ``algorithm`` config section."""
    return LossParams(algorithm.clip_low, algorithm.clip_high, algorithm.dual_clip_c, algorithm.loss_agg_mode)


class PolicyLoss(Protocol):
    """The one signature of every entry in :data:`POLICY_LOSSES`."""

    def __call__(self, inputs: LossInputs, params: LossParams = DEFAULT_LOSS_PARAMS) -> LossResult: ...


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def _tensors(inputs: LossInputs) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return inputs.log_prob, inputs.old_log_prob, inputs.advantages, inputs.response_mask


def _tokens(token_out: dict[str, Tensor] | None, ratio: Tensor, clipped: Tensor) -> None:
    """Hand the per-token ratio and whether the clipped term was taken to a caller that asked for them
    (the trajectory page's token view, docs/rollouts.md#token-signals)."""
    if token_out is not None:
        token_out["ratio"] = ratio.detach()
        token_out["clipped"] = clipped.detach().float()


@POLICY_LOSSES.register("vanilla")
def vanilla(inputs: LossInputs, params: LossParams = DEFAULT_LOSS_PARAMS) -> LossResult:
    """PPO clipped surrogate with dual clip, per token.

    ratio = exp(clamp(log_prob - old_log_prob, +-20));
    L = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)), and for A < 0 additionally
    min(L, -A * dual_clip_c) so a huge ratio on a negative advantage cannot blow the loss up.
    All inputs [S, T]; the loss is aggregated by ``agg_mode``. Metrics: clipfrac (share of tokens where
    the clipped term was taken), clipfrac_lower (dual clip active), ppo_kl (mean old - new log-prob).
    Papers: Schulman et al. 2017 (arXiv 1707.06347); dual clip: Ye et al. 2020 (arXiv 1912.09729).
    """
    log_prob, old_log_prob, advantages, response_mask = _tensors(inputs)
    clip_low, clip_high, dual_clip_c = params.clip_low, params.clip_high, params.dual_clip_c
    if dual_clip_c <= 1.0:
        raise ValueError(
            f"dual_clip_c must be > 1 (got {dual_clip_c}): set algorithm.dual_clip_c to e.g. 3.0"
        )
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pessimistic = torch.maximum(unclipped, clipped)
    lower_bound = -advantages * dual_clip_c
    losses = torch.where(advantages < 0, torch.minimum(pessimistic, lower_bound), pessimistic)
    metrics = {
        "clipfrac": masked_mean((clipped > unclipped).float(), response_mask).detach(),
        "clipfrac_lower": masked_mean(
            ((pessimistic > lower_bound) & (advantages < 0)).float(), response_mask
        ).detach(),
        "ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
    }
    # A token is clipped when either clip took its gradient away (the clipped term, or the dual clip).
    _tokens(inputs.token_out, ratio, (clipped > unclipped) | ((pessimistic > lower_bound) & (advantages < 0)))
    return agg_loss(losses, response_mask, params.agg_mode), metrics


@POLICY_LOSSES.register("gspo")
def gspo(inputs: LossInputs, params: LossParams = DEFAULT_LOSS_PARAMS) -> LossResult:
    """GSPO: one importance ratio per step (row), the length-normalised sequence ratio.

    log s = mean over the row's tokens of (log_prob - old_log_prob);
    token ratio = exp(log_prob - sg(log_prob) + sg(log s)) (value s, gradient of each token's log-prob),
    clamped above at exp(10); L = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high)).
    No dual clip (``dual_clip_c`` is ignored). The paper aggregates with seq-mean-token-mean, which the
    StepPPO preset sets; clip ranges are much tighter than PPO's (GSPO uses 3e-4 / 4e-4).
    All inputs [S, T]. Paper: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071).
    """
    log_prob, old_log_prob, advantages, mask = _tensors(inputs)
    clip_low, clip_high = params.clip_low, params.clip_high
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = _on_mask(log_ratio, mask).sum(-1) / (mask > 0).sum(-1).clamp(min=1).to(log_ratio.dtype)
    combined = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(combined, max=_GSPO_LOG_RATIO_MAX))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    losses = torch.maximum(unclipped, clipped)
    metrics = {
        "clipfrac": masked_mean((clipped > unclipped).float(), mask).detach(),
        "ppo_kl": masked_mean(-log_ratio, mask).detach(),
    }
    _tokens(inputs.token_out, ratio, clipped > unclipped)
    return agg_loss(losses, mask, params.agg_mode), metrics


@POLICY_LOSSES.register("reinforce")
def reinforce(inputs: LossInputs, params: LossParams = DEFAULT_LOSS_PARAMS) -> LossResult:
    """Plain policy gradient: L = -A * log_prob per token, no ratio and no clipping.

    ``old_log_prob`` only feeds the ppo_kl metric; clipfrac is always 0. All inputs [S, T].
    Paper: Williams 1992, "Simple statistical gradient-following algorithms".
    """
    log_prob, old_log_prob, advantages, response_mask = _tensors(inputs)
    metrics = {
        "clipfrac": torch.zeros((), dtype=log_prob.dtype, device=log_prob.device),
        "ppo_kl": masked_mean(old_log_prob - log_prob, response_mask).detach(),
    }
    _tokens(
        inputs.token_out, torch.exp(log_prob - old_log_prob), torch.zeros_like(log_prob, dtype=torch.bool)
    )
    return agg_loss(-advantages * log_prob, response_mask, params.agg_mode), metrics


# ------------------------------------------------------------------------------------------------ KL

KlFn = Callable[[Tensor, Tensor], Tensor]
KL_KINDS: Registry[KlFn] = Registry("KL penalty kind")


def _k1(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    return log_prob - ref_log_prob


def _abs(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    return (log_prob - ref_log_prob).abs()


def _k2(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    return 0.5 * (log_prob - ref_log_prob).square()


def _k3(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    # exp(x) - x - 1 with x = log(ref/pi); both clamps as in verl so one outlier token stays finite.
    log_ratio = torch.clamp(ref_log_prob - log_prob, -20.0, 20.0)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, -10.0, 10.0)


for _names, _fn in ((("kl", "k1"), _k1), (("abs",), _abs), (("mse", "k2"), _k2), (("low_var_kl", "k3"), _k3)):
    for _name in _names:
        KL_KINDS.add(_name, _fn)


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token KL estimate between the policy and the reference policy, [S, T] -> [S, T].

    Kinds (Schulman 2020, http://joschu.net/blog/kl-approx.html), with x = log pi - log pi_ref:
    kl / k1: x;  abs: |x|;  mse / k2: x^2 / 2;  low_var_kl / k3: exp(-x) + x - 1, with -x clamped to
    [-20, 20] and the result to [-10, 10] (verl). Unknown kinds raise RegistryError listing the choices.
    """
    return KL_KINDS.get(kind)(log_prob, ref_log_prob)


# --------------------------------------------------------------------------------------- value, entropy


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip: float = 0.5,
    agg_mode: str = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped value loss: 0.5 * agg(max((V - G)^2, (clip(V, V_old +- clip) - G)^2)).

    values: [S, T] current critic predictions; old_values: [S, T] predictions at rollout time;
    returns: [S, T] targets G. Metrics: vf_clipfrac (share of tokens where the clipped term was larger).
    Reference: the PPO2 value clipping of OpenAI baselines, as in verl's compute_value_loss.
    """
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    unclipped_loss = (values - returns).square()
    clipped_loss = (clipped_values - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(unclipped_loss, clipped_loss), mask, agg_mode)
    return loss, {"vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).float(), mask).detach()}


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution of each position, [..., V] -> [...].

    H = logsumexp(z) - sum softmax(z) * z, which avoids log(0) for tokens with zero probability.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
