"""Policy/value losses, aggregation, KL penalties and entropy: hand-computed cases and verl equality."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from trainer.algos.losses import (
    AGG_MODES,
    KL_KINDS,
    POLICY_LOSSES,
    LossInputs,
    LossParams,
    agg_loss,
    entropy_from_logits,
    kl_penalty,
    value_loss,
)
from trainer.registry import RegistryError

# ---------------------------------------------------------------------------------------- aggregation

LOSS_MAT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7.0 / 3.0),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-sum", 3.5),  # rows sum to 3 and 4; the empty row is left out
        ("seq-mean-token-mean", 2.75),  # rows average 1.5 and 4
    ],
)
def test_agg_loss_modes_by_hand(mode: str, expected: float) -> None:
    assert float(agg_loss(LOSS_MAT, MASK, mode)) == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_agg_loss_of_an_empty_mask_is_zero_not_nan(mode: str) -> None:
    loss = agg_loss(LOSS_MAT, torch.zeros_like(MASK), mode)
    assert float(loss.detach()) == 0.0


def test_an_unknown_agg_mode_lists_the_choices() -> None:
    with pytest.raises(RegistryError) as excinfo:
        agg_loss(LOSS_MAT, MASK, "token-sum-of-squares")
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert mode in str(excinfo.value)
    assert AGG_MODES.names() == ["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"]


# ------------------------------------------------------------------------------------- policy losses


def test_vanilla_ppo_clips_and_dual_clips_by_hand() -> None:
    # Token 1: A = 1, log-ratio 0.1 -> ratio 1.105171 inside [0.8, 1.2]: loss -1.105171.
    # Token 2: A = 1, log-ratio 0.5 -> ratio 1.648721 clipped to 1.2: loss -1.2 (counts in clipfrac).
    # Token 3: A = -1, log-ratio 2 -> ratio 7.389056; PPO's max gives 7.389056, the dual clip caps it
    #          at -A * c = 3 (counts in clipfrac_lower).
    # Token 4 is padding. token-mean = (-1.105171 - 1.2 + 3) / 3 = 0.231610.
    log_prob = torch.tensor([[0.1, 0.5, 2.0, 1.0]], requires_grad=True)
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, metrics = POLICY_LOSSES.get("vanilla")(LossInputs(log_prob, old, adv, mask))
    assert float(loss.detach()) == pytest.approx(0.231610, abs=1e-6)
    assert float(metrics["clipfrac"]) == pytest.approx(1 / 3)
    assert float(metrics["clipfrac_lower"]) == pytest.approx(1 / 3)
    assert float(metrics["ppo_kl"]) == pytest.approx(-(0.1 + 0.5 + 2.0) / 3)
    loss.backward()
    # Only the unclipped token carries a gradient: d/dlogp (-A e^logp) / 3 = -1.105171 / 3.
    assert log_prob.grad is not None
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.105171 / 3, 0.0, 0.0, 0.0]]))


def test_vanilla_ppo_clips_a_negative_advantage_below() -> None:
    # A = -1, log-ratio -0.5 -> ratio 0.606531 < 0.8: max(0.606531, 0.8) = 0.8, the clipped term.
    loss, metrics = POLICY_LOSSES.get("vanilla")(
        LossInputs(torch.tensor([[-0.5]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    )
    assert float(loss.detach()) == pytest.approx(0.8)
    assert float(metrics["clipfrac"]) == 1.0
    assert float(metrics["clipfrac_lower"]) == 0.0


def test_vanilla_ppo_rejects_a_dual_clip_of_one_or_less() -> None:
    with pytest.raises(ValueError, match="dual_clip_c"):
        POLICY_LOSSES.get("vanilla")(
            LossInputs(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1)),
            LossParams(dual_clip_c=1.0),
        )


def test_gspo_uses_one_length_normalised_ratio_per_step() -> None:
    # Row 1: log-ratios 0.1, 0.3 -> log s = 0.2, s = 1.221403 on both tokens; A = 1 -> clipped at 1.2:
    #        both tokens -1.2, and no gradient (the clipped branch is constant).
    # Row 2: one token, log-ratio -0.05 -> s = 0.951229 (inside the clip), A = -2: loss 1.902459.
    # seq-mean-token-mean: (-1.2 + 1.902459) / 2 = 0.351229.
    # Gradient on row 2's token: -A * s * (1 token)^-1 * (2 rows)^-1 = 2 * 0.951229 / 2 = 0.951229.
    log_prob = torch.tensor([[0.1, 0.3], [-0.05, 7.0]], requires_grad=True)
    old = torch.zeros(2, 2)
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, metrics = POLICY_LOSSES.get("gspo")(
        LossInputs(log_prob, old, adv, mask), LossParams(agg_mode="seq-mean-token-mean")
    )
    assert float(loss.detach()) == pytest.approx(0.351229, abs=1e-6)
    assert float(metrics["clipfrac"]) == pytest.approx(2 / 3)
    loss.backward()
    assert log_prob.grad is not None
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, 0.0], [0.951229, 0.0]]))


def test_reinforce_loss_is_minus_advantage_times_log_prob() -> None:
    # token-mean of -A * logp = (0.5*1 + 0.5*2) / 2 = 0.75; gradient -A / 2 = -0.25 per token.
    log_prob = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    loss, metrics = POLICY_LOSSES.get("reinforce")(
        LossInputs(
            log_prob,
            torch.tensor([[-1.5, -2.0, 0.0]]),
            torch.full((1, 3), 0.5),
            torch.tensor([[1.0, 1.0, 0.0]]),
        )
    )
    assert float(loss.detach()) == pytest.approx(0.75)
    assert float(metrics["clipfrac"]) == 0.0
    assert float(metrics["ppo_kl"]) == pytest.approx(((-1.5 + 1.0) + 0.0) / 2)
    loss.backward()
    assert log_prob.grad is not None
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-0.25, -0.25, 0.0]]))


@pytest.mark.parametrize("name", ["vanilla", "gspo", "reinforce"])
def test_every_policy_loss_takes_the_one_signature_and_reports_clipfrac_and_ppo_kl(name: str) -> None:
    gen = torch.Generator().manual_seed(0)
    log_prob = torch.randn(3, 4, generator=gen)
    loss, metrics = POLICY_LOSSES.get(name)(
        LossInputs(log_prob, log_prob + 0.1, torch.randn(3, 4, generator=gen), torch.ones(3, 4)),
        LossParams(clip_low=0.2, clip_high=0.28, dual_clip_c=3.0, agg_mode="seq-mean-token-sum"),
    )
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert {"clipfrac", "ppo_kl"} <= set(metrics)
    assert float(metrics["ppo_kl"]) == pytest.approx(0.1, abs=1e-6)


@pytest.mark.parametrize("name", ["vanilla", "gspo", "reinforce"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_inf_and_nan_on_padding_stay_out_of_the_loss_and_its_gradient(name: str, mode: str) -> None:
    log_prob = torch.tensor(
        [[-1.0, -0.5, float("-inf")], [-2.0, float("nan"), float("nan")]], requires_grad=True
    )
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    old = torch.tensor([[-1.1, -0.4, 0.0], [-2.2, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    loss, metrics = POLICY_LOSSES.get(name)(LossInputs(log_prob, old, adv, mask), LossParams(agg_mode=mode))
    assert torch.isfinite(loss)
    assert all(torch.isfinite(value) for value in metrics.values())
    loss.backward()
    assert log_prob.grad is not None and torch.isfinite(log_prob.grad).all()
    assert torch.all(log_prob.grad[mask == 0] == 0)


def test_the_policy_loss_registry_rejects_unknown_and_duplicate_names() -> None:
    assert POLICY_LOSSES.names() == ["gspo", "reinforce", "vanilla"]
    with pytest.raises(RegistryError, match="gspo, reinforce, vanilla"):
        POLICY_LOSSES.get("ppo")
    with pytest.raises(RegistryError, match="already registered"):
        POLICY_LOSSES.add("vanilla", POLICY_LOSSES.get("gspo"))


# ------------------------------------------------------------------------------------------- KL terms


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        # x = log pi - log pi_ref = 0.5 (first token) and -1 (second).
        (("kl", "k1"), [0.5, -1.0]),
        (("abs",), [0.5, 1.0]),
        (("mse", "k2"), [0.125, 0.5]),
        # exp(-x) + x - 1: exp(-0.5) - 0.5 = 0.106531; e - 2 = 0.718282.
        (("low_var_kl", "k3"), [0.106531, 0.718282]),
    ],
)
def test_kl_penalty_kinds_by_hand(kinds: tuple[str, ...], expected: list[float]) -> None:
    log_prob = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    for kind in kinds:
        torch.testing.assert_close(
            kl_penalty(log_prob, ref, kind), torch.tensor([expected]), atol=1e-6, rtol=0
        )


def test_low_var_kl_is_clamped_for_an_outlier_token() -> None:
    # -x = 100 is clamped to 20 and exp(20) - 21 to 10, so one stale token cannot dominate the loss.
    assert float(kl_penalty(torch.tensor([-100.0]), torch.tensor([0.0]))) == 10.0


def test_an_unknown_kl_kind_lists_the_choices() -> None:
    with pytest.raises(RegistryError, match="abs, k1, k2, k3, kl, low_var_kl, mse"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "full")
    assert len(KL_KINDS) == 7


# ------------------------------------------------------------------------------------ value, entropy


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_by_hand() -> None:
    # Token 1: V = 1, V_old = 0, G = 2, clip 0.5 -> clipped V = 0.5: max((1-2)^2, (0.5-2)^2) = 2.25.
    # Token 2: V = V_old = 2, G = 2.5 -> 0.25 both ways. Loss = 0.5 * mean(2.25, 0.25) = 0.625.
    loss, metrics = value_loss(
        torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 2.0]]), torch.tensor([[2.0, 2.5]]), torch.ones(1, 2)
    )
    assert float(loss.detach()) == pytest.approx(0.625)
    assert float(metrics["vf_clipfrac"]) == pytest.approx(0.5)


def test_entropy_from_logits_by_hand() -> None:
    # Uniform over 4: ln 4 = 1.386294. Probabilities 1/4, 3/4: -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335.
    # A near one-hot distribution has entropy ~0 (and no NaN from 0 * log 0).
    logits = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [math.log(1.0), math.log(3.0), -1e9, -1e9], [100.0, 0.0, 0.0, 0.0]]
    )
    torch.testing.assert_close(
        entropy_from_logits(logits), torch.tensor([1.386294, 0.562335, 0.0]), atol=1e-5, rtol=0
    )


# --------------------------------------------------------------------------- verl (optional extra)


@pytest.fixture(scope="module")
def verl_algos() -> Any:
    # verl is the optional `verl-core` extra; these checks run wherever it is installed.
    return pytest.importorskip("verl.trainer.ppo.core_algos")


def random_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    log_prob = -torch.rand(6, 11, generator=gen) * 3
    old = log_prob + torch.randn(6, 11, generator=gen) * 0.4
    adv = torch.randn(6, 11, generator=gen)
    mask = (torch.rand(6, 11, generator=gen) < 0.8).float()
    mask[:, 0] = 1.0
    return log_prob, old, adv, mask


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_vanilla_and_gspo_equal_verl_with_gradients(verl_algos: Any, mode: str) -> None:
    from omegaconf import OmegaConf
    from verl.workers.config import ActorConfig

    log_prob, old, adv, mask = random_inputs(0)
    dict_config = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.28,
            "clip_ratio_c": 3.0,
            "global_batch_info": {},
        }
    )
    actor_config = ActorConfig(
        strategy="fsdp",
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
    )
    pairs = [
        ("vanilla", verl_algos.compute_policy_loss_vanilla, dict_config),
        ("gspo", verl_algos.compute_policy_loss_gspo, actor_config),
    ]
    for name, theirs_fn, config in pairs:
        ours_lp, theirs_lp = log_prob.clone().requires_grad_(True), log_prob.clone().requires_grad_(True)
        ours, metrics = POLICY_LOSSES.get(name)(
            LossInputs(ours_lp, old, adv, mask), LossParams(clip_low=0.2, clip_high=0.28, agg_mode=mode)
        )
        theirs, their_metrics = theirs_fn(old, theirs_lp, adv, mask, mode, config)
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
        ours.backward()
        theirs.backward()
        torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, atol=1e-6, rtol=1e-5)
        assert float(metrics["clipfrac"]) == pytest.approx(their_metrics["actor/pg_clipfrac"], abs=1e-6)
        assert float(metrics["ppo_kl"]) == pytest.approx(their_metrics["actor/ppo_kl"], abs=1e-6)


def test_reinforce_loss_equals_verl(verl_algos: Any) -> None:
    from omegaconf import OmegaConf

    log_prob, old, adv, mask = random_inputs(1)
    config = OmegaConf.create({"global_batch_info": {}})
    ours, _ = POLICY_LOSSES.get("reinforce")(
        LossInputs(log_prob, old, adv, mask), LossParams(agg_mode="seq-mean-token-sum")
    )
    theirs, _ = verl_algos.compute_policy_loss_reinforce(
        old, log_prob, adv, mask, "seq-mean-token-sum", config
    )
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_kl_penalty_equals_verl(verl_algos: Any, kind: str) -> None:
    log_prob, ref, _, _ = random_inputs(2)
    ref = ref * 4  # some tokens far apart, to reach low_var_kl's clamps
    torch.testing.assert_close(kl_penalty(log_prob, ref, kind), verl_algos.kl_penalty(log_prob, ref, kind))


def test_value_loss_agg_loss_and_entropy_equal_verl(verl_algos: Any) -> None:
    from verl.utils.torch_functional import entropy_from_logits as verl_entropy

    values, old, returns, mask = random_inputs(3)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        ours, metrics = value_loss(values, old, returns, mask, clip=0.3, agg_mode=mode)
        theirs, clipfrac = verl_algos.compute_value_loss(values, returns, old, mask, 0.3, mode)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(metrics["vf_clipfrac"], clipfrac)
        torch.testing.assert_close(agg_loss(values, mask, mode), verl_algos.agg_loss(values, mask, mode))
    logits = torch.randn(4, 5, 33, generator=torch.Generator().manual_seed(4)) * 3
    torch.testing.assert_close(entropy_from_logits(logits), verl_entropy(logits))
