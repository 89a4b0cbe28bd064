"""Advantage estimators over step rows (Agent-R1 step-level MDP, docs/algorithms.md#advantage-estimators).

A batch row is one *step* (one LLM call). The rows of a trajectory are consecutive and in step order;
``traj_index`` names the trajectory, ``group_index`` the prompt it was sampled for (a group = the n
trajectories of one prompt). Each step's scalar reward sits on its last response token, so the step
reward is ``r_t = sum_j token_rewards[t, j]`` (token rewards are zero off the response mask) and
``R(tau) = sum_t r_t``.

Every estimator has the same signature, ``(batch, params)`` with one :class:`EstimatorParams`, and
returns ``(advantages [S, T], returns [S, T])``, zero on non-response tokens. All are vectorised: groups and trajectories are segment reductions (row sums of a
[G, n] view, or ``index_add_``), and discounted sums are a blocked scan
(:func:`_reverse_discounted_cumsum`) instead of a Python loop over steps or tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from trainer.registry import Registry

__all__ = ["DEFAULT_PARAMS", "ESTIMATORS", "AdvantageEstimator", "EstimatorParams", "StepBatch"]


@dataclass(frozen=True)
class StepBatch:
    """The tensors every estimator reads. S step rows, T response positions (padded).

    token_rewards: [S, T] float; the step's scalar reward on its last response token (plus any per-token
        shaping such as a KL penalty); zero where response_mask is 0, as in verl (step rewards are
        plain row sums, so a non-zero pad would count).
    response_mask: [S, T] 1 for model tokens, 0 for padding (and any non-model token).
    values: [S, T] critic values per response token, or None when the preset has no critic.
    traj_index: [S] integer; trajectory id per row. Rows of one trajectory are consecutive, in step order.
    group_index: [S] integer; prompt uid per row (the same for every row of a trajectory).
    anchor_index: [S] integer id of the step's anchor observation (GiGPO), or None.
    """

    token_rewards: Tensor
    response_mask: Tensor
    values: Tensor | None
    traj_index: Tensor
    group_index: Tensor
    anchor_index: Tensor | None = None

    def __post_init__(self) -> None:
        if self.token_rewards.dim() != 2:
            raise ValueError(f"token_rewards must be [S, T]; got shape {tuple(self.token_rewards.shape)}")
        shape = self.token_rewards.shape
        if self.response_mask.shape != shape:
            raise ValueError(
                f"response_mask has shape {tuple(self.response_mask.shape)}; token_rewards has {tuple(shape)}"
            )
        if self.values is not None and self.values.shape != shape:
            raise ValueError(f"values has shape {tuple(self.values.shape)}; token_rewards has {tuple(shape)}")
        indices = {"traj_index": self.traj_index, "group_index": self.group_index}
        if self.anchor_index is not None:
            indices["anchor_index"] = self.anchor_index
        for name, index in indices.items():
            if index.shape != shape[:1]:
                raise ValueError(f"{name} must be [S] = [{shape[0]}]; got shape {tuple(index.shape)}")
            if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
                raise ValueError(f"{name} must be an integer tensor; got {index.dtype}")


@dataclass(frozen=True)
class EstimatorParams:
    """The settings every estimator receives; each reads those its formula has.

    gamma: discount between steps (GAE, REINFORCE, GiGPO's step returns); between tokens for token_gae.
    lam: GAE's lambda.
    norm_adv_by_std: divide group advantages by the group's std (GRPO, GiGPO); False gives Dr.GRPO.
    step_weight: GiGPO's weight of the step-level (anchor group) advantage.
    eps: added to every std before dividing by it.
    """

    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std: bool = True
    step_weight: float = 1.0
    eps: float = 1e-6


DEFAULT_PARAMS = EstimatorParams()


class AdvantageEstimator(Protocol):
    """The one signature of every entry in :data:`ESTIMATORS`."""

    def __call__(
        self, batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS
    ) -> tuple[Tensor, Tensor]: ...


ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")

# Block length of the discounted scan. Each position costs `block` multiply-adds in the block matmul,
# and each level of the carry recursion is `block` times shorter; 64 keeps both small for rows of a
# few to a few thousand positions. Powers that underflow to 0 only drop terms that are negligible.
_SCAN_BLOCK = 64


# --------------------------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class _Trajectories:
    """Where each step row sits: trajectory number (0..N-1) and position within its trajectory."""

    inverse: Tensor  # [S] long
    position: Tensor  # [S] long
    starts: Tensor  # [N] long, first row of each trajectory
    count: int  # N
    longest: int  # L, the most steps in one trajectory


def _trajectories(batch: StepBatch) -> _Trajectories:
    traj, group = batch.traj_index, batch.group_index
    rows = traj.shape[0]
    is_start = torch.ones(rows, dtype=torch.bool, device=traj.device)
    is_start[1:] = traj[1:] != traj[:-1]
    count = int(is_start.sum())
    # Ids in ascending order cannot come back later; only an unordered batch needs the sort to check.
    ascending = bool((traj[1:] >= traj[:-1]).all())
    if not ascending and torch.unique(traj).numel() != count:
        raise ValueError("the step rows of each trajectory must be consecutive (traj_index repeats later)")
    row_index = torch.arange(rows, device=traj.device)
    if count == rows:  # one step per trajectory (single-step tasks): every mapping is the identity
        return _Trajectories(row_index, torch.zeros_like(row_index), row_index, rows, min(rows, 1))
    if bool(((group[1:] != group[:-1]) & ~is_start[1:]).any()):
        raise ValueError("group_index must be the same for every step row of a trajectory")
    starts = is_start.nonzero().squeeze(1)
    inverse = is_start.cumsum(0) - 1
    lengths = torch.diff(starts, append=starts.new_tensor([rows]))
    return _Trajectories(inverse, row_index - starts[inverse], starts, count, int(lengths.max()))


def _per_step(per_traj: Tensor, trajs: _Trajectories) -> Tensor:
    """A per-trajectory quantity [N] on each of the trajectory's step rows -> [S]."""
    return per_traj if trajs.longest <= 1 else per_traj[trajs.inverse]


def _trajectory_groups(batch: StepBatch, trajs: _Trajectories) -> Tensor:
    """The prompt group of each trajectory [N]."""
    return batch.group_index if trajs.longest <= 1 else batch.group_index[trajs.starts]


def _float(x: Tensor) -> Tensor:
    return x if x.dtype.is_floating_point else x.float()


def _step_rewards(batch: StepBatch) -> Tensor:
    """r_t per step row [S]: the sum of the row's token rewards (zero off the response mask)."""
    return _float(batch.token_rewards).sum(-1)


def _per_trajectory(step_values: Tensor, trajs: _Trajectories) -> Tensor:
    """Sum a per-step quantity [S] over each trajectory -> [N]."""
    if trajs.longest <= 1:  # one step per trajectory
        return step_values
    out = step_values.new_zeros(trajs.count)
    return out.index_add_(0, trajs.inverse, step_values)


def _to_step_grid(step_values: Tensor, trajs: _Trajectories) -> Tensor:
    """[S] per-step values -> [N, L] grid (trajectory, step), zero past each trajectory's end."""
    if trajs.longest <= 1:  # one step per trajectory: rows are already the grid
        return step_values.unsqueeze(1)
    grid = step_values.new_zeros(trajs.count, trajs.longest)
    grid[trajs.inverse, trajs.position] = step_values
    return grid


def _from_step_grid(grid: Tensor, trajs: _Trajectories) -> Tensor:
    return grid[trajs.inverse, trajs.position]


def _reverse_discounted_cumsum(x: Tensor, factor: float) -> Tensor:
    """y[:, t] = sum_{k >= t} factor^(k - t) * x[:, k], each row independent.

    A blocked scan: within blocks of ``_SCAN_BLOCK`` positions the sum is one matmul with the
    upper-triangular Toeplitz matrix of powers; the carry between blocks is the same recursion over
    block starts (with factor^block), solved by recursing on a tensor ``_SCAN_BLOCK`` times shorter.
    """
    rows, length = x.shape
    if length == 0:
        return x.clone()
    if factor == 1.0:
        return x.flip(-1).cumsum(-1).flip(-1)
    block = min(_SCAN_BLOCK, length)
    num_blocks = -(-length // block)
    padded = F.pad(x, (0, num_blocks * block - length)).reshape(rows, num_blocks, block)
    offsets = torch.arange(block, device=x.device, dtype=x.dtype)
    exponent = offsets[:, None] - offsets[None, :]  # [k, t] = k - t
    powers = torch.where(exponent >= 0, factor ** exponent.clamp(min=0), torch.zeros_like(exponent))
    y = padded @ powers
    if num_blocks > 1:
        block_sums = _reverse_discounted_cumsum(y[:, :, 0], factor**block)
        carry = F.pad(block_sums[:, 1:], (0, 1))  # the next block's start, 0 after the last block
        y = y + carry.unsqueeze(-1) * factor ** (block - offsets)
    return y.reshape(rows, num_blocks * block)[:, :length]


def _whiten(x: Tensor, eps: float) -> Tensor:
    """(x - mean) / (unbiased std + eps) over all entries; a single entry gives 0."""
    if x.numel() < 2:
        return torch.zeros_like(x)
    centred = x - x.mean()
    return centred / (centred.square().sum() / (x.numel() - 1)).sqrt().add(eps)


def _masked_whiten(x: Tensor, mask: Tensor, eps: float) -> Tensor:
    """Whiten over the tokens where mask = 1 (token-weighted, unbiased); the rest is returned as 0."""
    count = mask.sum()
    if count < 2:
        return torch.zeros_like(x)
    mean = (x * mask).sum() / count
    centred = (x - mean) * mask
    std = (centred.square().sum() / (count - 1)).sqrt()
    return centred / (std + eps)


@dataclass(frozen=True)
class _Groups:
    """Which group each of M entries belongs to.

    Work on ``view(x)``: when the groups are consecutive runs of equal length (n samples of each prompt
    side by side, the usual layout) that is an [G, n] view, per-group values broadcast as [G, 1] and
    sums are row sums; otherwise it is x itself, with scatter-add sums and gathered per-group values.
    """

    inverse: Tensor  # [M] group number 0..G-1
    counts: Tensor  # [G] entries per group
    run: int  # n > 0 when the groups are consecutive runs of exactly n entries, else 0

    def view(self, x: Tensor) -> Tensor:
        return x.view(-1, self.run) if self.run else x

    def sum(self, xv: Tensor) -> Tensor:
        """Per-group totals [G] of a ``view``."""
        if self.run:
            return xv.sum(1)
        return xv.new_zeros(self.counts.shape).index_add_(0, self.inverse, xv)

    def spread(self, per_group: Tensor) -> Tensor:
        """A per-group value [G], broadcastable against a ``view``."""
        return per_group.unsqueeze(1) if self.run else per_group[self.inverse]


def _groups(ids: Tensor) -> _Groups:
    """Group entries by id; ``ids`` is [M], or [M, k] (a group = entries equal in every column)."""
    if ids.dim() == 1 and bool((ids[1:] >= ids[:-1]).all()):
        # Ascending ids: the consecutive pass numbers them like the sort would, without sorting.
        _, inverse, counts = torch.unique_consecutive(ids, return_inverse=True, return_counts=True)
        run = int(counts[0]) if counts.numel() and bool((counts == counts[0]).all()) else 0
        return _Groups(inverse, counts, run)
    _, inverse, counts = torch.unique(
        ids, dim=0 if ids.dim() > 1 else None, return_inverse=True, return_counts=True
    )
    return _Groups(inverse, counts, 0)


def _group_normalise(x: Tensor, groups: Tensor, *, eps: float, by_std: bool) -> Tensor:
    """(x - group mean) [/ (unbiased group std + eps)]; members of a size-1 group get 0.

    ``groups`` is [M] ids, or [M, k] rows of ids (a group = rows equal in every column).
    """
    layout = _groups(groups)
    if layout.run == 1:
        return torch.zeros_like(x)
    size: float | Tensor
    dof: float | Tensor  # the unbiased std's n - 1, kept >= 1 so lone members stay finite
    if layout.run:  # one size for all: plain numbers instead of per-group tensors
        size, dof = float(layout.run), float(layout.run - 1)
    else:
        size = layout.counts.to(x.dtype)
        dof = (size - 1).clamp(min=1)
    values = layout.view(x)
    centred = values - layout.spread(layout.sum(values) / size)
    if by_std:
        centred = centred / layout.spread((layout.sum(centred.square()) / dof).sqrt() + eps)
    if layout.run:
        return centred.reshape(-1)
    return torch.where(layout.counts[layout.inverse] > 1, centred, torch.zeros_like(centred))


def _broadcast(per_step: Tensor, mask: Tensor) -> Tensor:
    """A per-step scalar [S] on every response token of its row -> [S, T]."""
    return per_step.unsqueeze(-1) * mask.to(per_step.dtype)


def _require_values(batch: StepBatch, name: str) -> Tensor:
    if batch.values is None:
        raise ValueError(f"estimator {name!r} needs critic values: StepBatch.values is None")
    return batch.values


def _traj_token_rows(x: Tensor, trajs: _Trajectories) -> Tensor:
    """[S, T] step rows -> [N, L*T]: a trajectory's step rows side by side, in step order."""
    if trajs.longest <= 1:
        return x
    grid = x.new_zeros(trajs.count, trajs.longest, x.shape[1])
    grid[trajs.inverse, trajs.position] = x
    return grid.reshape(trajs.count, -1)


def _step_token_rows(y: Tensor, trajs: _Trajectories, width: int) -> Tensor:
    """Inverse of :func:`_traj_token_rows`: [N, L*T] -> [S, T]."""
    if trajs.longest <= 1:
        return y
    return y.reshape(trajs.count, trajs.longest, width)[trajs.inverse, trajs.position]


def _token_gae_rows(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> Tensor:
    """Raw GAE along each row's response tokens; rewards and values must be 0 where mask is 0.

    Non-response tokens are skipped, not treated as time steps (as verl and Agent-R1 do): the next
    value of a response token is the value of the next *response* token. So the response tokens are
    first packed to the front of the row, the recursion runs on the packed rows, and the result is
    put back in place.
    """
    width = mask.shape[1]
    present = mask > 0
    packed = bool((present[:, 1:] & ~present[:, :-1]).any())  # some token follows a gap
    if packed:
        # Slot of each response token in its packed row; the rest go to a spare column `width`.
        slot = torch.where(present, present.cumsum(1) - 1, width)
        spare = rewards.new_zeros(rewards.shape[0], width + 1)
        rewards = spare.scatter(1, slot, rewards)[:, :width]
        values = spare.scatter(1, slot, values)[:, :width]
    next_values = F.pad(values[:, 1:], (0, 1))  # V = 0 past the last response token
    advantages = _reverse_discounted_cumsum(rewards + gamma * next_values - values, gamma * lam)
    if packed:
        advantages = advantages.gather(1, slot.clamp(max=width - 1)) * mask
    return advantages


# ------------------------------------------------------------------------------------------ estimators


@ESTIMATORS.register("gae")
@torch.no_grad()
def gae(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """Step-level GAE (Agent-R1): one value per step, the critic's value at the step boundary.

    V(s_t) = values[t, 0] (predicted at the first response position, i.e. from the whole prompt s_t);
    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with V = 0 past the last step;
    A_t = delta_t + gamma * lam * A_{t+1};  returns G_t = A_t + V(s_t).
    A is whitened over all step rows (each step counts once), then both are broadcast to the step's
    response tokens. Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    Paper: Schulman et al. 2016, "High-Dimensional Continuous Control Using GAE" (arXiv 1506.02438),
    applied per step as in Agent-R1 (arXiv 2511.14460).
    """
    trajs = _trajectories(batch)
    rewards = _step_rewards(batch)
    values = _require_values(batch, "gae")[:, 0].to(rewards.dtype)
    step_values = _to_step_grid(values, trajs)
    deltas = _to_step_grid(rewards, trajs) + params.gamma * F.pad(step_values[:, 1:], (0, 1)) - step_values
    advantages = _from_step_grid(_reverse_discounted_cumsum(deltas, params.gamma * params.lam), trajs)
    returns = advantages + values
    return _broadcast(_whiten(advantages, params.eps), batch.response_mask), _broadcast(
        returns, batch.response_mask
    )


@ESTIMATORS.register("token_gae")
@torch.no_grad()
def token_gae(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """Token-level GAE over a trajectory's response tokens, chained across step boundaries.

    Over the sequence of response tokens u of a trajectory (steps in order, non-response tokens skipped):
    delta_u = r_u + gamma * V_{u+1} - V_u (V = 0 after the trajectory's last response token);
    A_u = delta_u + gamma * lam * A_{u+1};  returns = A + V.
    A is whitened over all response tokens. Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    With one step per trajectory this is verl's ``compute_gae_advantage_return``.
    Paper: Schulman et al. 2016 (arXiv 1506.02438).
    """
    rewards = _float(batch.token_rewards)
    mask = batch.response_mask.to(rewards.dtype)
    # A select, not a product: a non-finite value on padding must not leak into the recursion.
    values = torch.where(mask > 0, _require_values(batch, "token_gae").to(rewards.dtype), 0.0)
    trajs = _trajectories(batch)
    raw = _token_gae_rows(
        _traj_token_rows(torch.where(mask > 0, rewards, 0.0), trajs),
        _traj_token_rows(values, trajs),
        _traj_token_rows(mask, trajs),
        params.gamma,
        params.lam,
    )
    raw = _step_token_rows(raw, trajs, mask.shape[1])
    return _masked_whiten(raw, mask, params.eps), (raw + values) * mask


def _episode_advantages(batch: StepBatch, trajs: _Trajectories, params: EstimatorParams) -> Tensor:
    """GRPO's per-trajectory advantage [N]: R(tau) normalised within its prompt group."""
    outcome = _per_trajectory(_step_rewards(batch), trajs)
    groups = _trajectory_groups(batch, trajs)
    return _group_normalise(outcome, groups, eps=params.eps, by_std=params.norm_adv_by_std)


@ESTIMATORS.register("grpo")
@torch.no_grad()
def grpo(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """GRPO outcome advantage, one value per trajectory, on every step and token of it.

    A(tau) = (R(tau) - mean_g R) / (std_g R + eps), std unbiased, over the trajectories of the prompt
    group g (each trajectory counts once however many steps it has); a group of one gives A = 0.
    ``params.norm_adv_by_std=False`` gives A = R - mean_g R (Dr.GRPO, arXiv 2503.20783).
    Returns equal the advantages. Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    Paper: Shao et al. 2024, DeepSeekMath (arXiv 2402.03300).
    """
    trajs = _trajectories(batch)
    advantages = _episode_advantages(batch, trajs, params)
    advantages = _broadcast(_per_step(advantages, trajs), batch.response_mask)
    return advantages, advantages


@ESTIMATORS.register("rloo")
@torch.no_grad()
def rloo(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out: A(tau_i) = R_i - mean_{j != i} R_j over the n trajectories of a prompt.

    Computed as R_i - (sum_g R - R_i) / (n - 1); a group of one (n = 1) has no baseline: A = R.
    Broadcast to every step and token of the trajectory; returns equal the advantages.
    Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    Paper: Ahmadian et al. 2024, "Back to Basics" (arXiv 2402.14740).
    """
    trajs = _trajectories(batch)
    outcome = _per_trajectory(_step_rewards(batch), trajs)
    layout = _groups(_trajectory_groups(batch, trajs))
    values = layout.view(outcome)
    size = layout.spread(layout.counts.to(outcome.dtype))
    others = layout.spread(layout.sum(values)) - values
    advantages = torch.where(size > 1, values - others / (size - 1).clamp(min=1), values).reshape(-1)
    advantages = _broadcast(_per_step(advantages, trajs), batch.response_mask)
    return advantages, advantages


def _discounted_step_returns(batch: StepBatch, trajs: _Trajectories, gamma: float) -> Tensor:
    """G_t = sum_{k >= t} gamma^(k - t) r_k within each trajectory -> [S]."""
    grid = _to_step_grid(_step_rewards(batch), trajs)
    return _from_step_grid(_reverse_discounted_cumsum(grid, gamma), trajs)


@ESTIMATORS.register("reinforce")
@torch.no_grad()
def reinforce(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """Step-level REINFORCE: discounted return-to-go per step, whitened over all step rows.

    G_t = sum_{k >= t} gamma^(k - t) r_k;  A_t = (G_t - mean G) / (std G + eps) over all step rows
    (unbiased std; each step counts once). Returns are the raw G_t. Both broadcast to the step's
    response tokens. Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    Paper: Williams 1992, "Simple statistical gradient-following algorithms".
    """
    trajs = _trajectories(batch)
    returns = _discounted_step_returns(batch, trajs, params.gamma)
    return _broadcast(_whiten(returns, params.eps), batch.response_mask), _broadcast(
        returns, batch.response_mask
    )


@ESTIMATORS.register("gigpo")
@torch.no_grad()
def gigpo(batch: StepBatch, params: EstimatorParams = DEFAULT_PARAMS) -> tuple[Tensor, Tensor]:
    """GiGPO: episode-level group advantage plus a step-level advantage within anchor-state groups.

    A^E(tau) = GRPO advantage of R(tau) in its prompt group (as :func:`grpo`);
    A^S(t) = G_t normalised within the steps that share an anchor observation, where
    G_t = sum_{k >= t} gamma^(k - t) r_k and steps are compared only inside the same prompt group
    (the key is (group_index, anchor_index)); an anchor group of one gives A^S = 0.
    A = A^E + step_weight * A^S, broadcast to the step's response tokens; returns equal the
    advantages. ``params.norm_adv_by_std=False`` drops the std division at both levels.
    Shapes: batch tensors [S, T] / [S]; outputs [S, T].
    Paper: Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978).
    """
    if batch.anchor_index is None:
        raise ValueError(
            "estimator 'gigpo' needs StepBatch.anchor_index (the anchor observation id per step)"
        )
    trajs = _trajectories(batch)
    episode = _per_step(_episode_advantages(batch, trajs, params), trajs)
    anchors = torch.stack([batch.group_index, batch.anchor_index.to(batch.group_index.dtype)], dim=1)
    returns = _discounted_step_returns(batch, trajs, params.gamma)
    step = _group_normalise(returns, anchors, eps=params.eps, by_std=params.norm_adv_by_std)
    advantages = _broadcast(episode + params.step_weight * step, batch.response_mask)
    return advantages, advantages
