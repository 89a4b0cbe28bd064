"""Agent-R1's step-level estimators inside verl (REFERENCE §3), for trajectory rows.

In verl a row is a whole trajectory: its response holds every turn, model tokens with mask 1 and
tool/env tokens with mask 0 (see ``agent_loop.py``). A step is one run of mask-1 tokens; its reward
r_t is the sum of the token rewards from its first token up to the next step's first token (our
agent loop puts each step's reward on its last model token; KL-in-reward adds per-token terms).

- ``agent_r1_step_reinforce``: G_t = Σ_{k≥t} gamma^(k-t) r_k, whitened over all step rows of the batch,
  broadcast to the step's tokens. Exact.
- ``agent_r1_gigpo``: A = A^episode + w·A^step. A^episode is GRPO's group-normalised R(τ). The anchor
  groups of A^step are APPROXIMATED by (prompt uid, step index): verl's estimator interface sees token
  rewards, masks and prompt uids but no observations, so steps are grouped by position rather than by
  identical observation. At step 0 (every sample starts from the prompt) this is exact.
- step-level GAE: verl calls GAE through a fixed branch (the only one that receives critic values),
  so :func:`install` wraps ``core_algos.compute_gae_advantage_return``; the wrapper computes the
  step-level form when ``AGENT_R1_GAE_MODE=step`` is in the worker's environment and verl's
  token-level GAE (our ``token_gae``) otherwise. V(s_t) is the critic's value at the step's first
  token (the state before the step's response), so the recursion is exactly REFERENCE §3's.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from trainer.backends.verl.command import GAE_MODE_ENV, GIGPO_WEIGHT_ENV

EPSILON = 1e-6

Span = tuple[int, int]  # [start, end) of one step's model tokens


def step_spans(mask_row: torch.Tensor) -> list[Span]:
    """The runs of 1s in one row's response mask: one (start, end) per step."""
    spans: list[Span] = []
    start = None
    values = [int(v) for v in mask_row.tolist()]
    for position, value in enumerate(values):
        if value and start is None:
            start = position
        elif not value and start is not None:
            spans.append((start, position))
            start = None
    if start is not None:
        spans.append((start, len(values)))
    return spans


def step_rewards(reward_row: torch.Tensor, spans: Sequence[Span]) -> list[float]:
    """r_t: the token rewards from step t's first token up to step t+1's first token."""
    rewards = []
    for index, (start, _) in enumerate(spans):
        end = spans[index + 1][0] if index + 1 < len(spans) else reward_row.shape[0]
        rewards.append(float(reward_row[start:end].sum()))
    return rewards


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}, with G past the last step = 0."""
    returns = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def _whiten(values: list[float]) -> list[float]:
    if len(values) < 2:
        return [0.0 for _ in values]
    tensor = torch.tensor(values, dtype=torch.float64)
    return ((tensor - tensor.mean()) / (tensor.std(unbiased=True) + EPSILON)).tolist()


def _broadcast(shape: torch.Size, spans_per_row: list[list[Span]], values: list[list[float]]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=torch.float32)
    for row, (spans, row_values) in enumerate(zip(spans_per_row, values, strict=True)):
        for (start, end), value in zip(spans, row_values, strict=True):
            out[row, start:end] = value
    return out


def _unflatten(flat: list[float], lengths: list[int]) -> list[list[float]]:
    rows, position = [], 0
    for length in lengths:
        rows.append(flat[position : position + length])
        position += length
    return rows


def step_reinforce(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-level REINFORCE (Williams 1992): A_t = whiten(G_t) over all step rows of the batch.

    token_level_rewards, response_mask: (batch, response_length). Returns (advantages, returns),
    both (batch, response_length), zero on tool tokens and padding.
    """
    gamma = float(_get(config, "gamma", 1.0))
    spans = [step_spans(row) for row in response_mask]
    returns = [
        discounted_returns(step_rewards(rewards, row_spans), gamma)
        for rewards, row_spans in zip(token_level_rewards, spans, strict=True)
    ]
    lengths = [len(row) for row in returns]
    advantages = _unflatten(_whiten([g for row in returns for g in row]), lengths)
    shape = token_level_rewards.shape
    return _broadcast(shape, spans, advantages), _broadcast(shape, spans, returns)


def _group_normalise(values: list[float], keys: Sequence[Hashable], by_std: bool) -> list[float]:
    """(x - mean_group) / (std_group + ε) with the unbiased std; a size-1 group gives 0."""
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for key, value in zip(keys, values, strict=True):
        groups[key].append(value)
    stats = {}
    for key, members in groups.items():
        tensor = torch.tensor(members, dtype=torch.float64)
        std = float(tensor.std(unbiased=True)) if len(members) > 1 else 1.0
        stats[key] = (float(tensor.mean()), std, len(members))
    out = []
    for key, value in zip(keys, values, strict=True):
        mean, std, size = stats[key]
        if size < 2:
            out.append(0.0)
        else:
            out.append((value - mean) / (std + EPSILON) if by_std else value - mean)
    return out


def gigpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GiGPO (Feng et al. 2025, arXiv 2505.10978): A = A^episode + w · A^step.

    index: (batch,) prompt uids (verl's ``uid``). Anchor groups are (uid, step index): see the module
    docstring for why this approximates "steps that share an anchor observation". w comes from
    ``AGENT_R1_GIGPO_STEP_WEIGHT`` (default 1.0). Returns (advantages, returns), (batch, length).
    """
    if index is None:
        raise ValueError("gigpo needs the prompt uid of every row (verl passes it as index)")
    gamma = float(_get(config, "gamma", 1.0))
    by_std = bool(_get(config, "norm_adv_by_std_in_grpo", True))
    weight = float(os.environ.get(GIGPO_WEIGHT_ENV, "1.0"))
    uids = [str(uid) for uid in index]
    spans = [step_spans(row) for row in response_mask]
    rewards = [step_rewards(r, s) for r, s in zip(token_level_rewards, spans, strict=True)]
    episode = _group_normalise([sum(row) for row in rewards], uids, by_std)
    returns = [discounted_returns(row, gamma) for row in rewards]
    anchors = [(uid, t) for uid, row in zip(uids, returns, strict=True) for t in range(len(row))]
    step = _unflatten(
        _group_normalise([g for row in returns for g in row], anchors, by_std), [len(r) for r in returns]
    )
    advantages = [
        [episode_value + weight * s for s in row_step]
        for episode_value, row_step in zip(episode, step, strict=True)
    ]
    shape = token_level_rewards.shape
    return _broadcast(shape, spans, advantages), _broadcast(shape, spans, returns)


def step_gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step-level GAE (Schulman et al. 2016 over steps): δ_t = r_t + gamma * V(s_{t+1}) - V(s_t),
    A_t = δ_t + gamma*lam*A_{t+1}, G_t = A_t + V(s_t); V past the last step = 0; A whitened over all step rows.

    values: (batch, response_length) critic values; V(s_t) is the value at step t's first token.
    """
    spans = [step_spans(row) for row in response_mask]
    advantages, returns = [], []
    for rewards_row, values_row, row_spans in zip(token_level_rewards, values, spans, strict=True):
        r = step_rewards(rewards_row, row_spans)
        v = [float(values_row[start]) for start, _ in row_spans]
        row_adv = [0.0] * len(r)
        running = 0.0
        for t in reversed(range(len(r))):
            next_value = v[t + 1] if t + 1 < len(v) else 0.0
            running = r[t] + gamma * next_value - v[t] + gamma * lam * running
            row_adv[t] = running
        advantages.append(row_adv)
        returns.append([a + value for a, value in zip(row_adv, v, strict=True)])
    whitened = _unflatten(_whiten([a for row in advantages for a in row]), [len(row) for row in advantages])
    shape = token_level_rewards.shape
    return _broadcast(shape, spans, whitened), _broadcast(shape, spans, returns)


def _get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    return getter(key, default) if getter is not None else getattr(config, key, default)


def _gae_dispatch(token_gae: Callable[..., Any]) -> Callable[..., Any]:
    def compute_gae_advantage_return(
        token_level_rewards: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        gamma: Any,
        lam: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if os.environ.get(GAE_MODE_ENV) == "step":
            return step_gae(token_level_rewards, values, response_mask, float(gamma), float(lam))
        return token_gae(
            token_level_rewards=token_level_rewards,
            values=values,
            response_mask=response_mask,
            gamma=gamma,
            lam=lam,
        )

    compute_gae_advantage_return.agent_r1 = True  # type: ignore[attr-defined]
    return compute_gae_advantage_return


def install() -> None:
    """Register our estimators in verl's registry and route GAE; safe to call more than once."""
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name, fn in (("agent_r1_step_reinforce", step_reinforce), ("agent_r1_gigpo", gigpo)):
        if registry.get(name) is not fn:
            core_algos.register_adv_est(name)(fn)
    current = core_algos.compute_gae_advantage_return
    if not getattr(current, "agent_r1", False):
        core_algos.compute_gae_advantage_return = _gae_dispatch(current)
