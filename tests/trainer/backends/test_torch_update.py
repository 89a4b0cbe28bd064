"""The update half of a step: step rows, response-only LM head, advantages, mini/micro-batches."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.algos.losses import entropy_from_logits
from trainer.backends.torch.batch import (
    ModelInputs,
    PackedInputs,
    SharedPrefixInputs,
    flatten,
    micro_batches,
    model_inputs,
)
from trainer.backends.torch.forward import (
    TargetLogProb,
    log_probs_and_entropy,
    packed_logits,
    response_logits,
    token_log_probs,
)
from trainer.backends.torch.update import Models, actor_micro_loss, mini_batches, prepare_update, update_actor
from trainer.config import RunConfig
from trainer.mdp import Step, Trajectory
from trainer.models import load_policy


def step(prompt: list[int], response: list[int], reward: float | None = None) -> Step:
    return Step(prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response), reward=reward)


def trajectory(group: str, index: int, *steps: Step) -> Trajectory:
    return Trajectory(
        id=f"{group}-{index}", group_id=group, sample_index=0, rollout_index=index, steps=list(steps)
    )


def batch() -> list[Trajectory]:
    """Two groups of two; trajectory a-0 has two steps; group b has equal rewards."""
    return [
        trajectory("a", 0, step([5, 6, 7], [8, 9], 0.0), step([5, 6, 7, 8, 9, 10], [11, 12, 13], 1.0)),
        trajectory("a", 1, step([5, 6, 7], [14], 0.0)),
        trajectory("b", 0, step([20, 21], [22, 23, 24, 25], 1.0)),
        trajectory("b", 1, step([20, 21], [26], 1.0)),
    ]


def config(**overrides: Any) -> RunConfig:
    values = {
        "algorithm.skip_zero_advantage_groups": True,
        "rollout.n": 2,
        "trainer.batch_size": 2,
        "optim.mini_batch_size": 4,
        "optim.micro_batch_size": 4,
        "algorithm.kl_coef": 0.0,
        "trainer.device": "cpu",
    }
    return RunConfig.from_preset("grpo", **{**values, **overrides})


def models_for(policy: Any, optimizer: torch.optim.Optimizer | None = None) -> Models:
    return Models(
        policy=policy,
        actor_optimizer=optimizer or torch.optim.SGD(policy.parameters(), lr=1.0),
        pad_token_id=0,
        device=torch.device("cpu"),
    )


@pytest.fixture
def policy(sharp_tiny_model_dir: Path) -> Any:
    return load_policy(sharp_tiny_model_dir)


def test_it_puts_each_step_reward_on_its_last_response_token() -> None:
    rows = flatten(batch())
    assert rows.traj_index.tolist() == [0, 0, 1, 2, 3]
    assert rows.group_index.tolist() == [0, 0, 0, 1, 1]
    assert rows.rows_of_traj == [[0, 1], [2], [3], [4]]
    expected = torch.zeros(5, 4)
    expected[1, 2] = 1.0
    expected[3, 3] = 1.0
    expected[4, 0] = 1.0
    assert torch.equal(rows.token_rewards(), expected)
    assert rows.response_mask.sum(-1).tolist() == [2, 3, 1, 4, 1]


def test_steps_with_the_same_prompt_share_an_anchor_within_their_group() -> None:
    rows = flatten(batch())
    anchors = rows.anchor_index.tolist()
    assert anchors[0] == anchors[2]  # a-0 step 0 and a-1 step 0 saw the same prompt
    assert len({anchors[0], anchors[1], anchors[3]}) == 3


def test_a_step_that_names_its_anchor_is_grouped_by_that_name() -> None:
    trajectories = batch()
    trajectories[0].steps[1].anchor = trajectories[1].steps[0].anchor = "room-1"
    anchors = flatten(trajectories).anchor_index.tolist()
    assert anchors[1] == anchors[2] != anchors[0]  # different prompts, one named observation


@pytest.mark.parametrize(
    ("share_prefixes", "pack", "kind"),
    [(True, False, SharedPrefixInputs), (False, False, ModelInputs), (False, True, PackedInputs)],
)
def test_the_response_only_lm_head_matches_a_full_forward(
    policy: Any, share_prefixes: bool, pack: bool, kind: type
) -> None:
    rows = flatten(batch())
    inputs = model_inputs(rows.steps, range(5), pad_token_id=0, share_prefixes=share_prefixes, pack=pack)
    assert isinstance(inputs, kind)
    if isinstance(inputs, SharedPrefixInputs):
        assert inputs.prompt_ids.shape[0] == 3  # five rows, three distinct prompts
    with torch.no_grad():
        logits = response_logits(policy, inputs)
        log_probs = token_log_probs(logits, rows.response_ids[:, : inputs.width], 0.7)
        for row, s in enumerate(rows.steps):
            full = (policy(torch.tensor([s.prompt_ids + s.response_ids])).logits[0] / 0.7).log_softmax(-1)
            start = len(s.prompt_ids) - 1
            expected = torch.stack([full[start + t, tok] for t, tok in enumerate(s.response_ids)])
            assert torch.allclose(log_probs[row, : len(s.response_ids)], expected, atol=1e-5)


def test_packing_holds_each_prompt_once_and_no_padding_beyond_the_longest_segment() -> None:
    rows = flatten(batch())
    inputs = model_inputs(rows.steps, range(5), pad_token_id=0, pack=True)
    assert isinstance(inputs, PackedInputs)
    # Segments: [5,6,7]+[8]+[] (4 tokens), [5..10]+[11,12] (8), [20,21]+[22,23,24]+[] (5); capacity 8,
    # so 4 and 5 cannot share a sequence.
    assert inputs.input_ids.tolist() == [
        [5, 6, 7, 8, 9, 10, 11, 12],
        [20, 21, 22, 23, 24, 0, 0, 0],
        [5, 6, 7, 8, 0, 0, 0, 0],
    ]
    assert inputs.position_ids[1, :5].tolist() == [0, 1, 2, 3, 4]
    # Row 4's only token is predicted by the prompt's last token, which row 3's tokens follow but
    # cannot be seen by it; row 3's tokens see the prompt and each other.
    mask = inputs.attention_mask[1, 0]
    assert mask[4, :5].tolist() == [True, True, True, True, True]
    assert len(inputs.row) == int(rows.response_mask.sum())  # one predicting position per token


def test_a_packed_update_gives_the_padded_update_loss_and_gradients(policy: Any) -> None:
    cfg = config(**{"algorithm.skip_zero_advantage_groups": False, "algorithm.entropy_coef": 0.01})
    grads = []
    for pack, share in ((True, True), (False, True), (False, False)):
        model = copy.deepcopy(policy)
        rows = flatten(batch())
        models = models_for(model)
        models.pack_sequences, models.share_prefixes = pack, share
        prepared = prepare_update(rows, models, cfg)
        inputs = model_inputs(rows.steps, list(range(5)), 0, share_prefixes=share, pack=pack)
        loss, _ = actor_micro_loss(
            response_logits(model, inputs), list(range(5)), inputs.width, rows, prepared, cfg
        )
        loss.backward()
        grads.append((loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])))
    for loss, grad in grads[1:]:
        assert torch.allclose(grads[0][0], loss, atol=1e-6)
        assert float((grads[0][1] - grad).abs().max()) < 1e-5 * float(grad.abs().max())
    assert grads[0][1].abs().sum() > 0


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])  # the entropy a metric only, or in the loss
def test_log_probs_taken_on_flat_packed_logits_give_the_loss_and_gradients_of_row_logits(
    policy: Any, entropy_coef: float
) -> None:
    cfg = config(**{"algorithm.skip_zero_advantage_groups": False, "algorithm.entropy_coef": entropy_coef})
    rows = flatten(batch())
    prepared = prepare_update(rows, models_for(policy), cfg)
    inputs = model_inputs(rows.steps, list(range(5)), 0, pack=True)
    assert isinstance(inputs, PackedInputs)
    targets = rows.response_ids[:, : inputs.width]
    found: dict[bool, tuple[torch.Tensor, dict[str, float], torch.Tensor, torch.Tensor]] = {}
    for flat in (False, True):
        policy.zero_grad(set_to_none=True)
        packed = inputs if flat else None
        logits = packed_logits(policy, inputs) if flat else response_logits(policy, inputs)
        assert logits.dim() == (2 if flat else 3)
        loss, metrics = actor_micro_loss(
            logits, list(range(5)), inputs.width, rows, prepared, cfg, packed=packed
        )
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in policy.parameters()])
        log_probs = token_log_probs(logits.detach(), targets, 0.7, packed=packed)
        found[flat] = (loss.detach(), {k: float(v) for k, v in metrics.items()}, grad, log_probs)
    (row_loss, row_metrics, row_grad, row_lp), (flat_loss, flat_metrics, flat_grad, flat_lp) = found.values()
    assert torch.allclose(row_loss, flat_loss, atol=1e-6)
    assert flat_metrics == pytest.approx(row_metrics, abs=1e-6)
    assert float((row_grad - flat_grad).abs().max()) < 1e-5 * float(row_grad.abs().max())
    mask = rows.response_mask > 0
    assert torch.allclose(row_lp[mask], flat_lp[mask], atol=1e-6)
    assert (flat_lp[~mask] == 0).all()  # nothing is computed past a response


def test_log_probs_and_entropy_share_one_logsumexp() -> None:
    logits = torch.randn(2, 3, 11, requires_grad=True)
    targets = torch.randint(0, 11, (2, 3))
    log_prob, entropy = log_probs_and_entropy(logits, targets, entropy_grad=True)
    assert torch.allclose(log_prob, logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1))
    assert torch.allclose(entropy, entropy_from_logits(logits), atol=1e-6)
    assert entropy.requires_grad
    assert not log_probs_and_entropy(logits, targets, entropy_grad=False)[1].requires_grad


def test_the_one_buffer_log_prob_function_gives_autograds_values_and_gradients() -> None:
    logits = (3 * torch.randn(2, 3, 11)).requires_grad_()
    targets = torch.randint(0, 11, (2, 3))
    weights = torch.randn(2, 3)
    log_prob, entropy = TargetLogProb.apply(logits, targets)
    (log_prob * weights).sum().backward()
    fused_grad, logits.grad = logits.grad, None
    expected = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    (expected * weights).sum().backward()
    assert torch.allclose(log_prob, expected, atol=1e-6)
    assert torch.allclose(entropy, entropy_from_logits(logits.detach()), atol=1e-5)
    assert not entropy.requires_grad
    assert torch.allclose(fused_grad, logits.grad, atol=1e-6)


def test_micro_batches_put_equal_prompts_together_and_order_by_length() -> None:
    rows = flatten(batch())
    # (prompt length, response length) of rows 0..4: (3, 2), (6, 3), (3, 1), (2, 4), (2, 1);
    # rows 0 and 2 share a prompt, and so do rows 3 and 4.
    assert micro_batches(rows.steps, range(5), 2) == [[4, 3], [2, 0], [1]]


def test_mini_batches_keep_trajectories_whole_and_cover_each_once_per_epoch() -> None:
    chunks = list(mini_batches([0, 1, 2, 3, 4, 5], 2, epochs=2, generator=torch.Generator().manual_seed(0)))
    assert len(chunks) == 6 and all(len(c) == 2 for c in chunks)
    assert sorted(t for chunk in chunks[:3] for t in chunk) == [0, 1, 2, 3, 4, 5]
    assert sorted(t for chunk in chunks[3:] for t in chunk) == [0, 1, 2, 3, 4, 5]


def test_it_leaves_out_groups_whose_advantages_are_all_zero(policy: Any) -> None:
    rows = flatten(batch())
    prepared = prepare_update(rows, models_for(policy), config())
    assert prepared.live == [0, 1]
    assert prepared.metrics["actor/skipped_groups"] == 1.0
    assert prepared.metrics["actor/skipped_trajectories"] == 2.0
    # GRPO on group a: R = [1, 0], mean 0.5, unbiased std 0.7071 -> ±0.7071, on every step of the trajectory.
    assert [s.advantage for s in rows.steps] == pytest.approx([0.7071, 0.7071, -0.7071, 0.0, 0.0], abs=1e-3)
    kept = prepare_update(
        flatten(batch()), models_for(policy), config(**{"algorithm.skip_zero_advantage_groups": False})
    )
    assert kept.live == [0, 1, 2, 3]


def test_old_log_probs_are_computed_only_when_the_update_is_off_policy(policy: Any) -> None:
    on_policy = prepare_update(flatten(batch()), models_for(policy), config())
    assert on_policy.old_log_probs is None
    rows = flatten(batch())
    off_policy = prepare_update(rows, models_for(policy), config(**{"optim.ppo_epochs": 2}))
    assert off_policy.old_log_probs is not None
    # Only the live rows (group a) are scored; the skipped group costs no forward pass.
    assert off_policy.old_log_probs[3:].abs().sum() == 0
    assert (off_policy.old_log_probs[:3][rows.response_mask[:3] > 0] < 0).all()


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_gradient_accumulation_gives_the_same_step_for_any_micro_batch_size(
    policy: Any, agg_mode: str
) -> None:
    cfg = config(**{"algorithm.loss_agg_mode": agg_mode, "algorithm.skip_zero_advantage_groups": False})
    results = []
    # Micro-batches of 5 and 2 rows share prompt prefixes, 1 row cannot; the run without sharing pads
    # every row; the packed one pads nothing.
    for micro, share, pack in ((5, True, False), (2, True, False), (1, True, False), (5, False, False),
                               (2, True, True)):  # fmt: skip
        model = copy.deepcopy(policy)
        rows = flatten(batch())
        models = models_for(model)
        models.share_prefixes, models.pack_sequences = share, pack
        prepared = prepare_update(rows, models, cfg)
        run_cfg = cfg.with_overrides(**{"optim.micro_batch_size": micro})
        update_actor(rows, prepared, models, run_cfg, generator=torch.Generator().manual_seed(0))
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    before = torch.cat([p.detach().flatten() for p in policy.parameters()])
    assert not torch.allclose(results[0], before)
    for other in results[1:]:
        assert torch.allclose(results[0], other, atol=1e-6)


def test_the_reward_kl_needs_and_uses_the_reference_model(policy: Any) -> None:
    cfg = RunConfig.from_preset(
        "rloo",
        **{"rollout.n": 2, "trainer.batch_size": 2, "optim.mini_batch_size": 4, "algorithm.kl_coef": 0.5},
    )
    models = models_for(policy)
    models.reference = copy.deepcopy(policy)
    with torch.no_grad():
        for p in models.reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rows = flatten(batch())
    prepared = prepare_update(rows, models, cfg)
    assert prepared.old_log_probs is not None and prepared.ref_log_probs is not None
    kl = (prepared.old_log_probs - prepared.ref_log_probs) * rows.response_mask
    assert torch.allclose(prepared.token_rewards, rows.token_rewards() - 0.5 * kl, atol=1e-6)
    assert prepared.metrics["actor/reward_kl"] != 0.0
