"""The update half of a training step: log-probs, values, advantages, and the actor/critic updates
(their forward passes: :mod:`.forward`).

Shapes: S step rows, T the longest response in the batch; a micro-batch sees b rows and its own
longest response Tm ≤ T, and slices the [S, T] tensors to [b, Tm].
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from trainer.algos.advantages import ESTIMATORS, EstimatorParams
from trainer.algos.losses import POLICY_LOSSES, LossInputs, agg_loss, kl_penalty, loss_params, value_loss
from trainer.backends.torch.batch import Inputs, PackedInputs, StepRows, micro_batches, model_inputs
from trainer.backends.torch.forward import (
    log_probs_and_entropy,
    micro_logits,
    response_values,
    token_log_probs,
)
from trainer.backends.torch.timing import timed
from trainer.contract import (
    ACTOR_GRAD_NORM,
    CRITIC_VALUE_LOSS,
    TIMING_ADV_S,
    TIMING_OLD_LOG_PROB_S,
    TIMING_REF_S,
    TIMING_UPDATE_ACTOR_S,
    TIMING_UPDATE_CRITIC_S,
    TIMING_VALUES_S,
)
from trainer.report.token_signals import keeps_token_signals

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.models import ValueHeadModel

logger = logging.getLogger(__name__)

# The value-clip range of PPO's critic loss (verl's cliprange_value default).
VALUE_CLIP = 0.5


@dataclass
class Models:
    """Everything the update touches: the policy, its frozen reference, the critic and the optimizers."""

    policy: Any  # a transformers causal LM (a PEFT model when training LoRA adapters)
    actor_optimizer: torch.optim.Optimizer
    pad_token_id: int
    device: torch.device
    reference: Any | None = None
    critic: ValueHeadModel | None = None
    critic_optimizer: torch.optim.Optimizer | None = None
    # Run each distinct prompt once per micro-batch (off with gradient checkpointing, which drops caches).
    share_prefixes: bool = True
    # Pack micro-batches padding-free (docs/performance.md#packed-batches); shares prompts too.
    pack_sequences: bool = True
    # LoRA: π_ref is the policy with its adapters switched off, so no second copy of the model is held.
    reference_is_base: bool = False

    @property
    def has_reference(self) -> bool:
        return self.reference is not None or self.reference_is_base

    @contextlib.contextmanager
    def reference_model(self) -> Iterator[Any]:
        """The frozen reference to run no-grad passes on."""
        if self.reference is not None:
            yield self.reference
            return
        if not self.reference_is_base:
            raise RuntimeError("this run has no reference model (no KL term)")
        with self.policy.disable_adapter():
            yield self.policy


@dataclass
class Prepared:
    """What the update needs besides the rows: advantages, returns and the no-grad passes."""

    advantages: torch.Tensor  # [S, T]
    returns: torch.Tensor  # [S, T]
    token_rewards: torch.Tensor  # [S, T], KL penalty included when kl_mode is "reward"
    old_log_probs: torch.Tensor | None  # [S, T]; None when the update is on-policy
    ref_log_probs: torch.Tensor | None  # [S, T]; None without a KL term
    values: torch.Tensor | None  # [S, T]; None without a critic
    live: list[int]  # trajectories the actor trains on (zero-advantage groups left out)
    metrics: dict[str, float] = field(default_factory=dict)
    # Per-token signals as the actor update computes them, [S, T] each (docs/rollouts.md#token-signals);
    # None when the run keeps none. The last pass over a row wins (its final epoch).
    tokens: dict[str, torch.Tensor] | None = None
    trained_rows: set[int] = field(default_factory=set)  # rows the actor update saw


CAPTURED = ("log_prob", "ratio", "entropy", "clipped", "kl")  # what the actor update fills in


# -- no-grad passes ---------------------------------------------------------------------------


def _micro_inputs(rows: StepRows, row_ids: list[int], models: Models) -> Inputs:
    inputs = model_inputs(
        rows.steps,
        row_ids,
        models.pad_token_id,
        share_prefixes=models.share_prefixes,
        pack=models.pack_sequences,
    )
    return inputs.to(models.device)


@torch.no_grad()
def batch_log_probs(
    model: Any,
    rows: StepRows,
    row_ids: list[int],
    models: Models,
    *,
    micro_batch_size: int,
    temperature: float,
) -> torch.Tensor:
    """log π(response tokens) [S, T] of ``row_ids`` (other rows stay 0), no gradient: π_old or π_ref."""
    out = torch.zeros_like(rows.response_mask)
    for micro in micro_batches(rows.steps, row_ids, micro_batch_size):
        inputs = _micro_inputs(rows, micro, models)
        logits, packed = micro_logits(model, inputs)
        targets = rows.response_ids[micro, : inputs.width].to(models.device)
        log_probs = token_log_probs(logits, targets, temperature, packed=packed)
        out[micro, : inputs.width] = log_probs.float().cpu()
    return out * rows.response_mask


@torch.no_grad()
def batch_values(
    critic: ValueHeadModel, rows: StepRows, models: Models, *, micro_batch_size: int
) -> torch.Tensor:
    """Critic values [S, T] at each response token's decision point (no gradient)."""
    out = torch.zeros_like(rows.response_mask)
    for micro in micro_batches(rows.steps, range(rows.num_rows), micro_batch_size):
        inputs = _micro_inputs(rows, micro, models)
        values = response_values(critic, inputs)
        out[micro, : inputs.width] = values.float().cpu()
    return out * rows.response_mask


# -- preparing the update ---------------------------------------------------------------------


def kl_enabled(config: RunConfig, mode: str) -> bool:
    return config.algorithm.kl_mode == mode and config.algorithm.kl_coef > 0


def is_on_policy(config: RunConfig, num_trajectories: int) -> bool:
    """One epoch and one mini-batch: the update runs on exactly the policy that sampled, so π_old = π_θ
    and the detached current log-probs serve (ratio 1) without a separate no-grad pass."""
    return config.optim.ppo_epochs == 1 and num_trajectories <= config.optim.mini_batch_size


def zero_advantage_trajectories(rows: StepRows, advantages: torch.Tensor) -> set[int]:
    """Trajectories of groups whose every advantage is exactly zero (nothing to learn from them)."""
    nonzero_rows = ((advantages != 0) & (rows.response_mask > 0)).any(dim=-1)
    live_groups = set(rows.group_index[nonzero_rows].tolist())
    return {
        t
        for t, row_ids in enumerate(rows.rows_of_traj)
        if int(rows.group_index[row_ids[0]]) not in live_groups
    }


def _estimate(
    rows: StepRows, token_rewards: torch.Tensor, values: torch.Tensor | None, config: RunConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    algorithm = config.algorithm
    params = EstimatorParams(
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        norm_adv_by_std=algorithm.norm_adv_by_std,
        step_weight=algorithm.gigpo_step_weight,
    )
    return ESTIMATORS.get(algorithm.estimator)(rows.step_batch(token_rewards, values), params)


def prepare_update(rows: StepRows, models: Models, config: RunConfig) -> Prepared:
    """Values, rewards (KL-in-reward), advantages; then π_old and π_ref only where the update needs them.

    Log-probs are computed after the advantages when the KL is not in the reward, so trajectories
    of zero-advantage groups (skipped by the update) cost no forward pass at all.
    """
    micro, temperature = config.optim.micro_batch_size, config.rollout.temperature
    all_rows = list(range(rows.num_rows))
    metrics: dict[str, float] = {}
    values = None
    if models.critic is not None:
        with timed(metrics, TIMING_VALUES_S):
            values = batch_values(models.critic, rows, models, micro_batch_size=micro)
    token_rewards = rows.token_rewards()
    old = ref = None
    if kl_enabled(config, "reward") and models.has_reference:
        with timed(metrics, TIMING_OLD_LOG_PROB_S):
            old = batch_log_probs(
                models.policy, rows, all_rows, models, micro_batch_size=micro, temperature=temperature
            )
        with timed(metrics, TIMING_REF_S), models.reference_model() as reference:
            ref = batch_log_probs(
                reference, rows, all_rows, models, micro_batch_size=micro, temperature=temperature
            )
        kl = kl_penalty(old, ref, kind=config.algorithm.kl_kind) * rows.response_mask
        token_rewards = token_rewards - config.algorithm.kl_coef * kl
        metrics["actor/reward_kl"] = float(kl.sum() / rows.response_mask.sum().clamp(min=1))
    with timed(metrics, TIMING_ADV_S):
        advantages, returns = _estimate(rows, token_rewards, values, config)
    live = list(range(len(rows.trajectories)))
    if config.algorithm.skip_zero_advantage_groups:
        skipped = zero_advantage_trajectories(rows, advantages)
        live = [t for t in live if t not in skipped]
        metrics["actor/skipped_trajectories"] = float(len(skipped))
        metrics["actor/skipped_groups"] = float(len({rows.trajectories[t].group_id for t in skipped}))
    live_rows = [row for t in live for row in rows.rows_of_traj[t]]
    recompute_old = old is None and bool(live) and not is_on_policy(config, len(live))
    metrics["actor/old_log_prob_pass"] = float(recompute_old or old is not None)
    if recompute_old:
        with timed(metrics, TIMING_OLD_LOG_PROB_S):
            old = batch_log_probs(
                models.policy, rows, live_rows, models, micro_batch_size=micro, temperature=temperature
            )
    if ref is None and live and kl_enabled(config, "loss") and models.has_reference:
        with timed(metrics, TIMING_REF_S), models.reference_model() as reference:
            ref = batch_log_probs(
                reference, rows, live_rows, models, micro_batch_size=micro, temperature=temperature
            )
    prepared = Prepared(advantages, returns, token_rewards, old, ref, values, live, metrics)
    if keeps_token_signals(config):
        prepared.tokens = {name: torch.zeros_like(rows.response_mask) for name in CAPTURED}
        if kl_enabled(config, "reward") and old is not None and ref is not None:
            prepared.tokens["kl"] = kl  # the KL in the reward, as subtracted above
    write_back(rows, prepared)
    return prepared


def write_back(rows: StepRows, prepared: Prepared) -> None:
    """Store each step's advantage (mean over its tokens) and value (at its boundary) for the viewer."""
    mask = rows.response_mask
    step_advantage = (prepared.advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    for row, step in enumerate(rows.steps):
        step.advantage = float(step_advantage[row])
        if prepared.values is not None:
            step.value = float(prepared.values[row, 0])


# -- mini-batches -----------------------------------------------------------------------------


def mini_batches(
    trajectories: list[int], size: int, *, epochs: int, generator: torch.Generator
) -> Iterator[list[int]]:
    """Trajectory ids per optimizer step: shuffled each epoch, ``size`` trajectories each, never split."""
    for _ in range(epochs):
        order = torch.randperm(len(trajectories), generator=generator).tolist()
        shuffled = [trajectories[i] for i in order]
        for start in range(0, len(shuffled), size):
            yield shuffled[start : start + size]


def _loss_scale(mask: torch.Tensor, total_tokens: float, total_rows: int, agg_mode: str) -> float:
    """Weight of one micro-batch's mean loss so that the accumulated sum equals the mini-batch loss."""
    if agg_mode == "token-mean":
        return float(mask.sum()) / max(total_tokens, 1.0)
    return mask.shape[0] / max(total_rows, 1)


def _accumulate(sums: dict[str, float], key: str, value: torch.Tensor | float, weight: float) -> None:
    sums[key] = sums.get(key, 0.0) + float(value) * weight


def optimizer_step(optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    # The optimizer's own parameters: with bf16 weights they are the fp32 masters that hold the grads.
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if torch.isfinite(grad_norm):
        optimizer.step()
    else:  # one bad batch must not poison the weights with NaNs
        logger.warning("skipping an optimizer step: gradient norm is %s", float(grad_norm))
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


# -- the actor --------------------------------------------------------------------------------


def _rows_slice(tensor: torch.Tensor, row_ids: list[int], width: int, device: torch.device) -> torch.Tensor:
    return tensor[row_ids, :width].to(device)


def actor_micro_loss(
    logits: torch.Tensor,
    row_ids: list[int],
    width: int,
    rows: StepRows,
    prepared: Prepared,
    config: RunConfig,
    *,
    packed: PackedInputs | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The actor loss of one micro-batch (its own mean; the caller scales it) and its metrics.

    ``logits`` are [b, Tm, V], or with ``packed`` the flat [N, V] of :func:`packed_logits`.
    """
    algorithm, device = config.algorithm, logits.device
    temperature = config.rollout.temperature
    scaled = logits.float() / temperature if temperature > 0 and temperature != 1.0 else logits.float()
    mask = _rows_slice(rows.response_mask, row_ids, width, device)
    targets = _rows_slice(rows.response_ids, row_ids, width, device)
    log_prob, token_entropy = log_probs_and_entropy(
        scaled, targets, entropy_grad=algorithm.entropy_coef > 0, packed=packed
    )
    old = (
        log_prob.detach()
        if prepared.old_log_probs is None
        else _rows_slice(prepared.old_log_probs, row_ids, width, device)
    )
    captured: dict[str, torch.Tensor] | None = None if prepared.tokens is None else {}
    advantages = _rows_slice(prepared.advantages, row_ids, width, device)
    loss, metrics = POLICY_LOSSES.get(algorithm.policy_loss)(
        LossInputs(log_prob, old, advantages, mask, token_out=captured), loss_params(algorithm)
    )
    metrics = {key: value.detach() for key, value in metrics.items()}
    metrics["pg_loss"] = loss.detach()
    entropy = agg_loss(token_entropy, mask, algorithm.loss_agg_mode)
    if algorithm.entropy_coef > 0:
        loss = loss - algorithm.entropy_coef * entropy
    metrics["entropy"] = entropy.detach()
    if prepared.ref_log_probs is not None:
        ref = _rows_slice(prepared.ref_log_probs, row_ids, width, device)
        token_kl = kl_penalty(log_prob, ref, kind=algorithm.kl_kind)
        kl = agg_loss(token_kl, mask, algorithm.loss_agg_mode)
        if kl_enabled(config, "loss"):
            loss = loss + algorithm.kl_coef * kl
            if captured is not None:
                captured["kl"] = token_kl
        metrics["kl"] = kl.detach()
    if captured is not None:
        _capture(prepared, row_ids, width, captured | {"log_prob": old, "entropy": token_entropy})
    return loss, metrics


def _capture(prepared: Prepared, row_ids: list[int], width: int, values: dict[str, torch.Tensor]) -> None:
    """Keep what this micro-batch computed per token: the same tensors the loss used, detached."""
    assert prepared.tokens is not None
    for name, value in values.items():
        prepared.tokens[name][row_ids, :width] = value.detach().float().cpu()
    prepared.trained_rows.update(row_ids)


def token_signals_of(rows: StepRows, prepared: Prepared, row: int) -> dict[str, list[float]]:
    """{signal: one value per response token} of one step row: its advantages, and what the actor update
    computed when it trained on the row (a row of a skipped group has its rollout log-probs only)."""
    step = rows.steps[row]
    n = len(step.response_ids)
    signals = {"advantage": prepared.advantages[row, :n].tolist()}
    if prepared.tokens is not None and row in prepared.trained_rows:
        signals.update({name: prepared.tokens[name][row, :n].tolist() for name in CAPTURED})
        if prepared.ref_log_probs is None:
            del signals["kl"]  # no reference, no KL
    elif len(step.rollout_log_probs) == n:
        signals["log_prob"] = [float(x) for x in step.rollout_log_probs]
    return signals


def update_actor(
    rows: StepRows, prepared: Prepared, models: Models, config: RunConfig, *, generator: torch.Generator
) -> dict[str, float]:
    """PPO epochs over mini-batches of whole trajectories, with gradient accumulation over micro-batches."""
    models.policy.train()
    sums: dict[str, float] = {}
    updates = 0
    agg_mode = config.algorithm.loss_agg_mode
    for trajectory_ids in mini_batches(
        prepared.live, config.optim.mini_batch_size, epochs=config.optim.ppo_epochs, generator=generator
    ):
        row_ids = [row for t in trajectory_ids for row in rows.rows_of_traj[t]]
        total_tokens = float(rows.response_mask[row_ids].sum())
        for micro in micro_batches(rows.steps, row_ids, config.optim.micro_batch_size):
            inputs = _micro_inputs(rows, micro, models)
            logits, packed = micro_logits(models.policy, inputs)
            loss, metrics = actor_micro_loss(
                logits, micro, inputs.width, rows, prepared, config, packed=packed
            )
            scale = _loss_scale(rows.response_mask[micro], total_tokens, len(row_ids), agg_mode)
            (loss * scale).backward()
            for key, value in metrics.items():
                _accumulate(sums, f"actor/{key}", value, scale)
        grad_norm = optimizer_step(models.actor_optimizer, config.optim.grad_clip)
        _accumulate(sums, ACTOR_GRAD_NORM, grad_norm, 1.0)
        updates += 1
    return {key: value / max(updates, 1) for key, value in sums.items()} | {"actor/updates": float(updates)}


# -- the critic -------------------------------------------------------------------------------


def update_critic(
    rows: StepRows, prepared: Prepared, models: Models, config: RunConfig, *, generator: torch.Generator
) -> dict[str, float]:
    """Value regression towards the returns over all trajectories (a zero advantage is still a target)."""
    if models.critic is None or models.critic_optimizer is None or prepared.values is None:
        return {}
    models.critic.train()
    sums: dict[str, float] = {}
    updates = 0
    agg_mode = config.algorithm.loss_agg_mode
    everything = list(range(len(rows.trajectories)))
    for trajectory_ids in mini_batches(
        everything, config.optim.mini_batch_size, epochs=config.optim.ppo_epochs, generator=generator
    ):
        row_ids = [row for t in trajectory_ids for row in rows.rows_of_traj[t]]
        total_tokens = float(rows.response_mask[row_ids].sum())
        for micro in micro_batches(rows.steps, row_ids, config.optim.micro_batch_size):
            inputs = _micro_inputs(rows, micro, models)
            values = response_values(models.critic, inputs).float()
            device, width = values.device, inputs.width
            mask = _rows_slice(rows.response_mask, micro, width, device)
            loss, metrics = value_loss(
                values,
                _rows_slice(prepared.values, micro, width, device),
                _rows_slice(prepared.returns, micro, width, device),
                mask,
                clip=VALUE_CLIP,
                agg_mode=agg_mode,
            )
            scale = _loss_scale(mask, total_tokens, len(row_ids), agg_mode)
            (loss * scale).backward()
            _accumulate(sums, CRITIC_VALUE_LOSS, loss.detach(), scale)
            for key, value in metrics.items():
                _accumulate(sums, f"critic/{key}", value.detach(), scale)
        grad_norm = optimizer_step(models.critic_optimizer, config.optim.grad_clip)
        _accumulate(sums, "critic/grad_norm", grad_norm, 1.0)
        updates += 1
    return {key: value / max(updates, 1) for key, value in sums.items()}


# -- one whole update -------------------------------------------------------------------------


def update_policy(
    rows: StepRows, prepared: Prepared, models: Models, config: RunConfig, *, generator: torch.Generator
) -> dict[str, float]:
    """The critic update, then the actor update on the trajectories that carry a learning signal."""
    metrics = dict(prepared.metrics)
    metrics.update(_advantage_metrics(rows, prepared))
    with timed(metrics, TIMING_UPDATE_CRITIC_S):
        metrics.update(update_critic(rows, prepared, models, config, generator=generator))
    if prepared.live:
        with timed(metrics, TIMING_UPDATE_ACTOR_S):
            metrics.update(update_actor(rows, prepared, models, config, generator=generator))
    else:
        logger.info("every group has zero advantages: no actor update this step")
        metrics["actor/updates"] = 0.0
    return metrics


def _advantage_metrics(rows: StepRows, prepared: Prepared) -> dict[str, float]:
    mask = rows.response_mask.bool()
    advantages = prepared.advantages[mask]
    metrics = {
        "critic/advantages/mean": float(advantages.mean()),
        "critic/advantages/max": float(advantages.max()),
        "critic/advantages/min": float(advantages.min()),
    }
    if prepared.values is not None:
        metrics["critic/values/mean"] = float(prepared.values[mask].mean())
        metrics["critic/returns/mean"] = float(prepared.returns[mask].mean())
    return metrics
