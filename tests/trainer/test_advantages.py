"""Advantage estimators: hand-computed cases, a slow loop reference, registry behaviour.

Equality with verl's own estimators, through the adapter the verl backend runs, is in
tests/trainer/backends/verl/test_verl_estimators.py.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable

import pytest
import torch

from trainer.algos.advantages import ESTIMATORS, EstimatorParams, StepBatch
from trainer.config_sections import ANCHOR_ESTIMATORS, CRITIC_ESTIMATORS
from trainer.registry import RegistryError

ALL = ("gae", "token_gae", "grpo", "rloo", "reinforce", "gigpo")
EPS = 1e-6


def step_rows(
    rewards: list[float],
    lengths: list[int],
    *,
    width: int,
    traj: list[int],
    group: list[int],
    values: list[list[float]] | None = None,
    anchor: list[int] | None = None,
) -> StepBatch:
    """A batch whose row s has `lengths[s]` response tokens and reward `rewards[s]` on the last one."""
    rows = len(rewards)
    mask = torch.zeros(rows, width)
    token_rewards = torch.zeros(rows, width)
    for s, (reward, length) in enumerate(zip(rewards, lengths, strict=True)):
        mask[s, :length] = 1.0
        token_rewards[s, length - 1] = reward
    value_tensor = None
    if values is not None:
        value_tensor = torch.full((rows, width), 99.0)  # off-mask values must never matter
        for s, row in enumerate(values):
            value_tensor[s, : len(row)] = torch.tensor(row)
    return StepBatch(
        token_rewards=token_rewards,
        response_mask=mask,
        values=value_tensor,
        traj_index=torch.tensor(traj),
        group_index=torch.tensor(group),
        anchor_index=None if anchor is None else torch.tensor(anchor),
    )


def per_row(x: torch.Tensor, batch: StepBatch) -> list[float]:
    """The value a per-step estimator put on each row, after checking it is the same on every token."""
    out = []
    for s in range(x.shape[0]):
        on = x[s][batch.response_mask[s] > 0]
        assert torch.allclose(on, on[0].expand_as(on)), f"row {s} is not constant over its tokens"
        assert torch.all(x[s][batch.response_mask[s] == 0] == 0), f"row {s} is non-zero off the mask"
        out.append(float(on[0]))
    return out


# ------------------------------------------------------------------------------- hand-computed cases


def test_grpo_normalises_outcome_within_each_prompt_group() -> None:
    # Group 7: three one-step trajectories with R = 1, 0, 0: mean 1/3, unbiased std sqrt(1/3).
    # A = (1 - 1/3) / sqrt(1/3) = 1.154700, (0 - 1/3) / sqrt(1/3) = -0.577350. Group 9 has one
    # trajectory: a group of one gives A = 0 (not R, not NaN).
    batch = step_rows([1.0, 0.0, 0.0, 5.0], [2, 3, 1, 2], width=3, traj=[0, 1, 2, 3], group=[7, 7, 7, 9])
    advantages, returns = ESTIMATORS.get("grpo")(batch)
    assert per_row(advantages, batch) == pytest.approx([1.154700, -0.577350, -0.577350, 0.0], abs=1e-5)
    assert torch.equal(returns, advantages)


def test_grpo_sums_a_multi_step_trajectory_and_gives_every_step_its_advantage() -> None:
    # Trajectory 10 has two steps with rewards 0 and 1 (R = 1); trajectory 11 one step with R = 0.
    # Each trajectory counts once: mean 0.5, std sqrt(0.5) -> A = +-0.5 / 0.707107 = +-0.707107.
    batch = step_rows([0.0, 1.0, 0.0], [2, 1, 3], width=3, traj=[10, 10, 11], group=[3, 3, 3])
    advantages, _ = ESTIMATORS.get("grpo")(batch)
    assert per_row(advantages, batch) == pytest.approx([0.707107, 0.707107, -0.707107], abs=1e-5)


def test_grpo_without_std_normalisation_is_dr_grpo() -> None:
    # Same batch: R - mean = 1 - 0.5 and 0 - 0.5.
    batch = step_rows([0.0, 1.0, 0.0], [2, 1, 3], width=3, traj=[10, 10, 11], group=[3, 3, 3])
    advantages, _ = ESTIMATORS.get("grpo")(batch, EstimatorParams(norm_adv_by_std=False))
    assert per_row(advantages, batch) == pytest.approx([0.5, 0.5, -0.5], abs=1e-6)


def test_rloo_subtracts_the_mean_of_the_other_samples() -> None:
    # Group 0: R = 1, 2, 6 -> 1 - (2+6)/2 = -3, 2 - (1+6)/2 = -1.5, 6 - (1+2)/2 = 4.5.
    # Group 1: a single sample has no baseline: A = R = 5.
    batch = step_rows([1.0, 2.0, 6.0, 5.0], [1, 2, 3, 1], width=3, traj=[0, 1, 2, 3], group=[0, 0, 0, 1])
    advantages, returns = ESTIMATORS.get("rloo")(batch)
    assert per_row(advantages, batch) == pytest.approx([-3.0, -1.5, 4.5, 5.0], abs=1e-6)
    assert torch.equal(returns, advantages)


def test_reinforce_whitens_discounted_returns_over_step_rows() -> None:
    # Trajectory 0: rewards 1, 2 with gamma 0.5 -> G = 1 + 0.5*2 = 2, then 2. Trajectory 1: G = 0.
    # G = [2, 2, 0]: mean 4/3, unbiased std sqrt(4/3) = 1.154701 -> A = 0.577350, 0.577350, -1.154700.
    batch = step_rows([1.0, 2.0, 0.0], [2, 2, 1], width=2, traj=[0, 0, 1], group=[0, 0, 0])
    advantages, returns = ESTIMATORS.get("reinforce")(batch, EstimatorParams(gamma=0.5))
    assert per_row(advantages, batch) == pytest.approx([0.577350, 0.577350, -1.154700], abs=1e-5)
    assert per_row(returns, batch) == pytest.approx([2.0, 2.0, 0.0], abs=1e-6)


def test_step_level_gae_uses_one_value_per_step_and_zero_past_the_last_step() -> None:
    # gamma 0.9, lam 0.8. Trajectory 0: r = 0, 1 and V(s_t) = values[t, 0] = 0.5, 0.8.
    #   last step: delta = 1 + 0.9*0 - 0.8 = 0.2 -> A = 0.2, G = 1.0
    #   first:     delta = 0 + 0.9*0.8 - 0.5 = 0.22 -> A = 0.22 + 0.72*0.2 = 0.364, G = 0.864
    # Trajectory 1: r = 0.5, V = 0.1 -> A = 0.4, G = 0.5.
    # Whitened [0.364, 0.2, 0.4]: mean 0.321333, unbiased std 0.106608 -> 0.400215, -1.138112, 0.737897.
    # Values after the first token (0.7, 0.3 below) are ignored by step-level GAE.
    batch = step_rows(
        [0.0, 1.0, 0.5],
        [2, 3, 1],
        width=3,
        traj=[0, 0, 1],
        group=[0, 0, 1],
        values=[[0.5, 0.7], [0.8, 0.3, 0.3], [0.1]],
    )
    advantages, returns = ESTIMATORS.get("gae")(batch, EstimatorParams(gamma=0.9, lam=0.8))
    assert per_row(advantages, batch) == pytest.approx([0.400215, -1.138112, 0.737897], abs=1e-5)
    assert per_row(returns, batch) == pytest.approx([0.864, 1.0, 0.5], abs=1e-6)


def test_token_gae_chains_across_the_steps_of_a_trajectory() -> None:
    # One trajectory: step 0 has tokens a, b (values 0.5, 0.6, reward 0), step 1 has token c (value 0.7,
    # reward 1). gamma 0.9, lam 0.5 (gamma*lam = 0.45):
    #   c: delta = 1 - 0.7 = 0.3                   A = 0.3
    #   b: delta = 0.9*0.7 - 0.6 = 0.03 (next = c) A = 0.03 + 0.45*0.3 = 0.165
    #   a: delta = 0.9*0.6 - 0.5 = 0.04            A = 0.04 + 0.45*0.165 = 0.11425
    # Returns A + V: 0.61425, 0.765, 1.0. Whitened over the 3 tokens: -0.821115, -0.292512, 1.113627.
    batch = step_rows([0.0, 1.0], [2, 1], width=3, traj=[4, 4], group=[0, 0], values=[[0.5, 0.6], [0.7]])
    advantages, returns = ESTIMATORS.get("token_gae")(batch, EstimatorParams(gamma=0.9, lam=0.5))
    expected_adv = torch.tensor([[-0.821115, -0.292512, 0.0], [1.113627, 0.0, 0.0]])
    expected_ret = torch.tensor([[0.61425, 0.765, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(advantages, expected_adv, atol=1e-5, rtol=0)
    torch.testing.assert_close(returns, expected_ret, atol=1e-6, rtol=0)


def test_token_gae_skips_non_model_tokens_inside_a_row() -> None:
    # Row mask [1, 0, 1]: the middle token (say, a tool response) is no time step. gamma = lam = 1,
    # values 0.2, 9.0 (ignored), 0.4, reward 1 on the last token:
    #   last: A = 1 - 0.4 = 0.6;  first: delta = 0.4 - 0.2 = 0.2 -> A = 0.8  (sum of rewards - V)
    batch = StepBatch(
        token_rewards=torch.tensor([[0.0, 0.0, 1.0]]),
        response_mask=torch.tensor([[1.0, 0.0, 1.0]]),
        values=torch.tensor([[0.2, 9.0, 0.4]]),
        traj_index=torch.tensor([0]),
        group_index=torch.tensor([0]),
    )
    _, returns = ESTIMATORS.get("token_gae")(batch)
    raw = returns - batch.values * batch.response_mask  # type: ignore[operator]
    torch.testing.assert_close(raw, torch.tensor([[0.8, 0.0, 0.6]]), atol=1e-6, rtol=0)


def test_token_gae_ignores_non_finite_values_on_padding() -> None:
    batch = StepBatch(
        token_rewards=torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        response_mask=torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
        values=torch.tensor([[0.2, 0.4, float("nan")], [0.1, float("inf"), float("nan")]]),
        traj_index=torch.tensor([0, 1]),
        group_index=torch.tensor([0, 0]),
    )
    advantages, returns = ESTIMATORS.get("token_gae")(batch)
    assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()
    # gamma = lam = 1: returns are the reward-to-go, 1 on trajectory 0's tokens and 0 on trajectory 1's.
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))


def test_gigpo_adds_a_step_advantage_among_steps_that_share_an_anchor() -> None:
    # Group 0: trajectory A = steps (anchor 10, r 0), (anchor 11, r 1);
    #          trajectory B = steps (anchor 10, r 0), (anchor 12, r 0).
    # Episode: R = 1, 0 -> A^E = +-0.707107. Step returns (gamma 1): A: 1, 1; B: 0, 0.
    # Anchor 10 holds A's and B's first steps (G = 1, 0) -> A^S = +-0.707107; anchors 11, 12 are alone -> 0.
    # Group 1: trajectory C, one step, anchor 10 again: it must not join group 0's anchor 10, so it is
    # alone at both levels -> 0. With step_weight 0.5:
    #   A0 = 0.707107 + 0.5*0.707107 = 1.060660, A1 = 0.707107, B0 = -1.060660, B1 = -0.707107, C0 = 0.
    batch = step_rows(
        [0.0, 1.0, 0.0, 0.0, 3.0],
        [1, 1, 1, 1, 1],
        width=1,
        traj=[0, 0, 1, 1, 2],
        group=[0, 0, 0, 0, 1],
        anchor=[10, 11, 10, 12, 10],
    )
    advantages, returns = ESTIMATORS.get("gigpo")(batch, EstimatorParams(step_weight=0.5))
    assert per_row(advantages, batch) == pytest.approx(
        [1.060660, 0.707107, -1.060660, -0.707107, 0.0], abs=1e-5
    )
    assert torch.equal(returns, advantages)


# ------------------------------------------------------------------------------------- validation


def test_it_rejects_trajectory_rows_that_are_not_consecutive() -> None:
    batch = step_rows([1.0, 0.0, 1.0], [1, 1, 1], width=1, traj=[0, 1, 0], group=[0, 0, 0])
    with pytest.raises(ValueError, match="consecutive"):
        ESTIMATORS.get("grpo")(batch)


def test_it_rejects_a_trajectory_whose_group_changes() -> None:
    batch = step_rows([1.0, 0.0], [1, 1], width=1, traj=[0, 0], group=[0, 1])
    with pytest.raises(ValueError, match="group_index"):
        ESTIMATORS.get("grpo")(batch)


@pytest.mark.parametrize("name", ["gae", "token_gae"])
def test_it_rejects_critic_estimators_without_values(name: str) -> None:
    batch = step_rows([1.0], [1], width=1, traj=[0], group=[0])
    with pytest.raises(ValueError, match="values"):
        ESTIMATORS.get(name)(batch)


def test_it_rejects_gigpo_without_anchors() -> None:
    batch = step_rows([1.0, 0.0], [1, 1], width=1, traj=[0, 1], group=[0, 0])
    with pytest.raises(ValueError, match="anchor_index"):
        ESTIMATORS.get("gigpo")(batch)


@pytest.mark.parametrize("name", ESTIMATORS.names())
def test_the_config_knows_which_estimators_read_values_and_anchors(name: str) -> None:
    # The verl adapter hands critic values and anchor ids to exactly these estimators.
    batch = step_rows([1.0, 0.0], [1, 1], width=1, traj=[0, 1], group=[0, 0])
    needs = name in CRITIC_ESTIMATORS or name in ANCHOR_ESTIMATORS
    if needs:
        with pytest.raises(ValueError, match=r"values|anchor_index"):
            ESTIMATORS.get(name)(batch)
    else:
        ESTIMATORS.get(name)(batch)


def test_it_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="response_mask"):
        StepBatch(
            torch.zeros(2, 3), torch.ones(2, 4), None, torch.arange(2), torch.zeros(2, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="group_index"):
        StepBatch(
            torch.zeros(2, 3), torch.ones(2, 3), None, torch.arange(2), torch.zeros(3, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="integer"):
        StepBatch(torch.zeros(2, 3), torch.ones(2, 3), None, torch.arange(2), torch.zeros(2))


# -------------------------------------------------------------------------------------- registry


def test_the_registry_holds_exactly_the_six_estimators() -> None:
    assert ESTIMATORS.names() == sorted(ALL)


def test_an_unknown_estimator_lists_the_choices() -> None:
    with pytest.raises(RegistryError) as excinfo:
        ESTIMATORS.get("ppo2")
    message = str(excinfo.value)
    assert "ppo2" in message
    for name in ALL:
        assert name in message


def test_a_duplicate_estimator_is_rejected_and_the_original_kept() -> None:
    original = ESTIMATORS.get("grpo")
    with pytest.raises(RegistryError, match="already registered"):
        ESTIMATORS.add("grpo", ESTIMATORS.get("rloo"))
    assert ESTIMATORS.get("grpo") is original


@pytest.mark.parametrize("name", ALL)
def test_every_estimator_takes_the_one_signature_and_returns_no_grad_tensors(name: str) -> None:
    batch = random_batch(3)
    values = batch.values.requires_grad_(True)  # type: ignore[union-attr]
    batch = StepBatch(
        batch.token_rewards,
        batch.response_mask,
        values,
        batch.traj_index,
        batch.group_index,
        batch.anchor_index,
    )
    params = EstimatorParams(gamma=0.9, lam=0.95, norm_adv_by_std=True, step_weight=1.0, eps=1e-6)
    advantages, returns = ESTIMATORS.get(name)(batch, params)
    assert advantages.shape == returns.shape == batch.token_rewards.shape
    assert not advantages.requires_grad and not returns.requires_grad
    off = batch.response_mask == 0
    assert torch.all(advantages[off] == 0) and torch.all(returns[off] == 0)


@pytest.mark.parametrize("name", ALL)
def test_every_estimator_handles_an_empty_batch(name: str) -> None:
    none = torch.zeros(0, dtype=torch.long)
    batch = StepBatch(torch.zeros(0, 5), torch.zeros(0, 5), torch.zeros(0, 5), none, none, none)
    advantages, returns = ESTIMATORS.get(name)(batch)
    assert advantages.shape == returns.shape == (0, 5)


# ------------------------------------------------------------------ slow loop reference implementation


LAYOUTS = ("mixed", "equal", "shuffled", "singletons")


def random_batch(seed: int, layout: str = "mixed", *, width: int = 7, max_steps: int = 4) -> StepBatch:
    """Random trajectories (1-max_steps steps) with masks that have gaps, in one of four layouts.

    mixed: groups of 1-4 trajectories, ascending group ids, descending trajectory ids;
    equal: 3 trajectories per group, everything ascending (the usual layout of a rollout batch);
    shuffled: group ids in no order, so a group's trajectories are not side by side;
    singletons: one trajectory per group.
    """
    rng = random.Random(seed)
    rows: list[tuple[list[float], list[float], list[float], int, int, int]] = []
    traj_ids = sorted(rng.sample(range(1000, 9000), 40), reverse=layout == "equal")
    plan = [(50 + 3 * g, {"mixed": rng.randint(1, 4), "equal": 3}.get(layout, 1)) for g in range(5)]
    if layout == "shuffled":
        plan = [(rng.choice([7, 3, 9]), 1) for _ in range(9)]
    for group_id, size in plan:
        for _ in range(size):
            traj_id = traj_ids.pop()
            for _ in range(rng.randint(1, max_steps)):
                mask = [float(rng.random() < 0.7) for _ in range(width)]
                if not any(mask):
                    mask[rng.randrange(width)] = 1.0
                last = max(i for i, m in enumerate(mask) if m)
                reward = [0.0] * width
                reward[last] = rng.choice([0.0, 1.0, rng.uniform(-1, 2)])
                values = [rng.uniform(-1, 1) for _ in range(width)]
                rows.append((reward, mask, values, traj_id, group_id, rng.randint(0, 2)))
    reward, mask, values, traj, group, anchor = zip(*rows, strict=True)
    return StepBatch(
        token_rewards=torch.tensor(reward),
        response_mask=torch.tensor(mask),
        values=torch.tensor(values),
        traj_index=torch.tensor(traj),
        group_index=torch.tensor(group),
        anchor_index=torch.tensor(anchor),
    )


def trajectories(batch: StepBatch) -> list[list[int]]:
    out: list[list[int]] = []
    for s, t in enumerate(batch.traj_index.tolist()):
        if out and batch.traj_index[out[-1][0]] == t:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def reward_of(batch: StepBatch, s: int) -> float:
    return sum(batch.token_rewards[s].tolist())


def normalise(xs: list[float], norm: bool) -> list[float]:
    if len(xs) == 1:
        return [0.0]
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs)
    return [(x - mean) / (std + EPS) if norm else x - mean for x in xs]


def whiten(xs: list[float]) -> list[float]:
    return normalise(xs, True)


def spread(batch: StepBatch, per_step: dict[int, float]) -> torch.Tensor:
    out = torch.zeros_like(batch.token_rewards, dtype=torch.float64)
    for s, value in per_step.items():
        out[s] = value * batch.response_mask[s].double()
    return out


def ref_grpo(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    by_group: dict[int, list[list[int]]] = defaultdict(list)
    for tr in trajectories(batch):
        by_group[int(batch.group_index[tr[0]])].append(tr)
    per_step: dict[int, float] = {}
    for trs in by_group.values():
        advs = normalise([sum(reward_of(batch, s) for s in tr) for tr in trs], norm)
        for tr, a in zip(trs, advs, strict=True):
            per_step.update(dict.fromkeys(tr, a))
    return spread(batch, per_step)


def ref_rloo(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    by_group: dict[int, list[list[int]]] = defaultdict(list)
    for tr in trajectories(batch):
        by_group[int(batch.group_index[tr[0]])].append(tr)
    per_step: dict[int, float] = {}
    for trs in by_group.values():
        outcomes = [sum(reward_of(batch, s) for s in tr) for tr in trs]
        for i, tr in enumerate(trs):
            others = outcomes[:i] + outcomes[i + 1 :]
            a = outcomes[i] - statistics.fmean(others) if others else outcomes[i]
            per_step.update(dict.fromkeys(tr, a))
    return spread(batch, per_step)


def discounted(batch: StepBatch, gamma: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for tr in trajectories(batch):
        running = 0.0
        for s in reversed(tr):
            running = reward_of(batch, s) + gamma * running
            out[s] = running
    return out


def ref_reinforce(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    returns = discounted(batch, gamma)
    rows = sorted(returns)
    return spread(batch, dict(zip(rows, whiten([returns[s] for s in rows]), strict=True)))


def ref_gae(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    raw: dict[int, float] = {}
    for tr in trajectories(batch):
        next_value, next_adv = 0.0, 0.0
        for s in reversed(tr):
            value = float(batch.values[s, 0])  # type: ignore[index]
            next_adv = reward_of(batch, s) + gamma * next_value - value + gamma * lam * next_adv
            next_value = value
            raw[s] = next_adv
    rows = sorted(raw)
    return spread(batch, dict(zip(rows, whiten([raw[s] for s in rows]), strict=True)))


def ref_token_gae(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    raw: dict[tuple[int, int], float] = {}
    for tr in trajectories(batch):
        tokens = [
            (s, t) for s in tr for t in range(batch.response_mask.shape[1]) if batch.response_mask[s, t]
        ]
        next_value, next_adv = 0.0, 0.0
        for s, t in reversed(tokens):
            value = float(batch.values[s, t])  # type: ignore[index]
            next_adv = float(batch.token_rewards[s, t]) + gamma * next_value - value + gamma * lam * next_adv
            next_value = value
            raw[(s, t)] = next_adv
    keys = list(raw)
    out = torch.zeros_like(batch.token_rewards, dtype=torch.float64)
    for key, a in zip(keys, whiten([raw[k] for k in keys]), strict=True):
        out[key] = a
    return out


def ref_gigpo(batch: StepBatch, gamma: float, lam: float, norm: bool, w: float) -> torch.Tensor:
    episode = ref_grpo(batch, gamma, lam, norm, w)
    returns = discounted(batch, gamma)
    by_anchor: dict[tuple[int, int], list[int]] = defaultdict(list)
    for s in sorted(returns):
        by_anchor[(int(batch.group_index[s]), int(batch.anchor_index[s]))].append(s)  # type: ignore[index]
    per_step: dict[int, float] = {}
    for rows in by_anchor.values():
        per_step.update(zip(rows, normalise([returns[s] for s in rows], norm), strict=True))
    return episode + w * spread(batch, per_step)


LOOP_ESTIMATORS: dict[str, Callable[[StepBatch, float, float, bool, float], torch.Tensor]] = {
    "gae": ref_gae,
    "token_gae": ref_token_gae,
    "grpo": ref_grpo,
    "rloo": ref_rloo,
    "reinforce": ref_reinforce,
    "gigpo": ref_gigpo,
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ALL)
def test_vectorised_estimators_match_the_loop_reference(name: str, layout: str, seed: int) -> None:
    rng = random.Random(seed)
    gamma, lam = rng.choice([1.0, 0.9, 0.0]), rng.choice([1.0, 0.8])
    norm, weight = rng.random() < 0.7, rng.uniform(0.2, 1.5)
    batch = random_batch(seed, layout)
    params = EstimatorParams(gamma=gamma, lam=lam, norm_adv_by_std=norm, step_weight=weight)
    advantages, _ = ESTIMATORS.get(name)(batch, params)
    expected = LOOP_ESTIMATORS[name](batch, gamma, lam, norm, weight)
    torch.testing.assert_close(advantages.double(), expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["gae", "reinforce", "gigpo", "token_gae"])
def test_long_trajectories_match_the_loop_reference(name: str) -> None:
    # 150 steps of 3 tokens: the step scan spans several 64-long blocks, the token scan 450 tokens.
    rng = random.Random(11)
    steps, width = 150, 3
    batch = StepBatch(
        token_rewards=torch.tensor([[0.0, 0.0, rng.uniform(-1, 1)] for _ in range(2 * steps)]),
        response_mask=torch.ones(2 * steps, width),
        values=torch.tensor([[rng.uniform(-1, 1) for _ in range(width)] for _ in range(2 * steps)]),
        traj_index=torch.tensor([0] * steps + [1] * steps),
        group_index=torch.zeros(2 * steps, dtype=torch.long),
        anchor_index=torch.tensor([rng.randint(0, 4) for _ in range(2 * steps)]),
    )
    advantages, _ = ESTIMATORS.get(name)(batch, EstimatorParams(gamma=0.97, lam=0.9))
    expected = LOOP_ESTIMATORS[name](batch, 0.97, 0.9, True, 1.0)
    torch.testing.assert_close(advantages.double(), expected, atol=2e-4, rtol=1e-3)


def test_discounted_returns_stay_finite_when_powers_underflow() -> None:
    # gamma = 0.5 over 300 steps: 0.5**299 underflows float32; each G_t must still be r_t + 0.5 * G_{t+1}.
    steps = 300
    rewards = torch.rand(steps, 1, generator=torch.Generator().manual_seed(0))
    zeros = torch.zeros(steps, dtype=torch.long)
    batch = StepBatch(rewards, torch.ones(steps, 1), None, zeros, zeros)
    _, returns = ESTIMATORS.get("reinforce")(batch, EstimatorParams(gamma=0.5))
    g = returns[:, 0]
    assert torch.isfinite(g).all()
    torch.testing.assert_close(g[:-1], rewards[:-1, 0] + 0.5 * g[1:], atol=1e-5, rtol=0)
    assert math.isclose(float(g[-1]), float(rewards[-1, 0]), abs_tol=1e-7)
