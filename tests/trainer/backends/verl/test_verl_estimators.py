"""Our step-level estimators as verl sees them: trajectory rows, steps = runs of mask-1 tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from trainer.backends.verl import estimators

# Row A: step 0 = tokens 0-1 (reward 0.5), tool tokens 2-3, step 1 = tokens 4-5 (reward 1), padding.
MASK_A = [1, 1, 0, 0, 1, 1, 0]
REWARD_A = [0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]
# Row B: one step of three tokens, reward 0.
MASK_B = [1, 1, 1, 0, 0, 0, 0]
REWARD_B = [0.0] * 7
ALGO = OmegaConf.create({"gamma": 1.0, "norm_adv_by_std_in_grpo": True})


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([REWARD_A, REWARD_B]), torch.tensor([MASK_A, MASK_B])


def test_steps_are_the_runs_of_model_tokens_and_carry_the_rewards_up_to_the_next_step() -> None:
    spans = estimators.step_spans(torch.tensor(MASK_A))
    assert spans == [(0, 2), (4, 6)]
    assert estimators.step_rewards(torch.tensor(REWARD_A), spans) == [0.5, 1.0]


def test_step_reinforce_whitens_the_discounted_step_returns_over_all_step_rows() -> None:
    rewards, mask = batch()
    advantages, returns = estimators.step_reinforce(rewards, mask, config=ALGO)
    # G = [1.5, 1.0] and [0.0]: mean 5/6, unbiased std sqrt(7/12).
    std = math.sqrt(7 / 12)
    expected = [(1.5 - 5 / 6) / std, (1.0 - 5 / 6) / std, (0.0 - 5 / 6) / std]
    assert advantages[0, :2].tolist() == pytest.approx([expected[0]] * 2, abs=1e-5)
    assert advantages[0, 4:6].tolist() == pytest.approx([expected[1]] * 2, abs=1e-5)
    assert advantages[1, :3].tolist() == pytest.approx([expected[2]] * 3, abs=1e-5)
    assert advantages[0, 2:4].tolist() == [0.0, 0.0]  # tool tokens carry no advantage
    assert returns[0].tolist() == [1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0]


def test_gigpo_adds_the_weighted_anchor_group_advantage_to_the_episode_advantage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(estimators.GIGPO_WEIGHT_ENV, "0.5")
    rewards, mask = batch()
    advantages, _ = estimators.gigpo(rewards, mask, index=np.array(["u", "u"], dtype=object), config=ALGO)
    # Episode: R = 1.5 and 0 -> ±1/sqrt(2). Anchor (u, 0): G = 1.5 and 0 -> ±1/sqrt(2);
    # anchor (u, 1) holds one step -> 0.
    half = 1 / math.sqrt(2)
    assert advantages[0, 0].item() == pytest.approx(half + 0.5 * half, abs=1e-5)
    assert advantages[0, 4].item() == pytest.approx(half, abs=1e-5)
    assert advantages[1, 0].item() == pytest.approx(-half - 0.5 * half, abs=1e-5)


def test_step_gae_uses_the_value_at_each_steps_first_token() -> None:
    rewards, mask = torch.tensor([REWARD_A]), torch.tensor([MASK_A])
    values = torch.tensor([[0.2, 9.0, 9.0, 9.0, 0.6, 9.0, 9.0]])  # 9s: values that must not be read
    advantages, returns = estimators.step_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    # delta_1 = 1 - 0.6 = 0.4; delta_0 = 0.5 + 0.6 - 0.2 = 0.9; A = [1.3, 0.4]; G = A + V = [1.5, 1.0].
    assert returns[0].tolist() == pytest.approx([1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0])
    assert advantages[0, 0].item() == pytest.approx(1 / math.sqrt(2), abs=1e-5)  # whitened [1.3, 0.4]
    assert advantages[0, 4].item() == pytest.approx(-1 / math.sqrt(2), abs=1e-5)


def test_install_registers_our_estimators_and_routes_gae_by_the_workers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verl.trainer.ppo import core_algos

    estimators.install()
    estimators.install()  # a second worker import must not fail
    assert core_algos.get_adv_estimator_fn("agent_r1_gigpo") is estimators.gigpo
    assert core_algos.get_adv_estimator_fn("agent_r1_step_reinforce") is estimators.step_reinforce
    rewards, mask = torch.tensor([REWARD_A]), torch.tensor([MASK_A])
    values = torch.tensor([[0.2, 0.3, 0.0, 0.0, 0.6, 0.7, 0.0]])
    monkeypatch.setenv(estimators.GAE_MODE_ENV, "step")
    step_advantages, _ = core_algos.compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0)
    monkeypatch.setenv(estimators.GAE_MODE_ENV, "token")
    token_advantages, _ = core_algos.compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0)
    # Step-level: one advantage for both tokens of a step; token-level: G - V_t differs per token.
    assert step_advantages[0, 0].item() == pytest.approx(step_advantages[0, 1].item())
    assert token_advantages[0, 0].item() != pytest.approx(token_advantages[0, 1].item())
