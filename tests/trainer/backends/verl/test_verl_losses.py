"""Our losses as verl runs them: trajectory rows split into steps, trainer.algos.losses on the steps.

One mini-batch of multi-step trajectories goes through verl's own ``ppo_loss`` (the function its
actor workers call per micro-batch, with the policy loss our command names and the actor config it
sets) and, as step rows, through the math the torch backend runs; loss and gradients agree.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import NonTensorStack, TensorDict
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import trainer_base
from verl.utils import tensordict_utils as tu
from verl.workers import engine_workers
from verl.workers.config import ActorConfig, PolicyLossConfig
from verl.workers.utils.losses import ppo_loss

from trainer.algos.losses import (
    AGG_MODES,
    POLICY_LOSSES,
    LossInputs,
    agg_loss,
    kl_penalty,
    loss_params,
    value_loss,
)
from trainer.algos.presets import PRESETS
from trainer.backends.torch.update import VALUE_CLIP
from trainer.backends.verl import signals
from trainer.backends.verl.command import VerlPaths, overrides, verl_loss_name
from trainer.backends.verl.losses import install, verl_ppo_loss, verl_value_loss
from trainer.config import RunConfig
from trainer.config_sections import AlgorithmConfig
from trainer.report.reporters import MemoryReporter

PATHS = VerlPaths(
    train_files="/shared/data/train.parquet",
    val_files=None,
    checkpoint_dir="/shared/checkpoints",
    rollout_dir="/shared/rollouts",
    validation_dir="/shared/validation",
    agent_loop_config="/shared/agent_loops.yaml",
)
# One mini-batch of four trajectories: per step (model tokens, tool tokens after it); the rows are
# split into two micro-batches, as verl's engine splits a mini-batch.
TRAJECTORIES = [[(3, 2), (2, 1), (4, 0)], [(5, 0)], [(2, 3), (3, 0)], [(1, 1), (2, 2), (2, 0)]]
MICRO_BATCHES = [[0, 1], [2, 3]]
PROMPT = 3
FIELDS = ("log_prob", "old_log_prob", "ref_log_prob", "advantages", "values", "old_values", "returns")


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    install()


@dataclass
class Batch:
    """The same tokens as verl's [B, R] trajectory rows and as our [S, W] step rows."""

    rows: dict[str, torch.Tensor]
    steps: dict[str, torch.Tensor]
    places: list[tuple[int, int, int]]  # per step: row, first position, length

    def to_rows(self, per_step: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(self.rows["response_mask"], dtype=per_step.dtype)
        for step, (row, start, length) in enumerate(self.places):
            out[row, start : start + length] = per_step[step, :length]
        return out


def batch(seed: int = 0) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    places, row_lengths = [], []
    for row, steps in enumerate(TRAJECTORIES):
        position = 0
        for length, tool in steps:
            places.append((row, position, length))
            position += length + tool
        row_lengths.append(position)
    width, rows_width = max(length for _, _, length in places), max(row_lengths) + 1
    mask = torch.zeros(len(places), width)
    for step, (_, _, length) in enumerate(places):
        mask[step, :length] = 1
    steps = {name: torch.randn(len(places), width, generator=gen) for name in FIELDS}
    steps["log_prob"] = -steps["log_prob"].abs() - 0.1
    # Steps whose log-ratio is tiny (inside GSPO's clip of 3e-4) and steps far outside it, in one row.
    drift = torch.tensor([1e-4, 0.4])[torch.arange(len(places)) % 2][:, None]
    steps["old_log_prob"] = steps["log_prob"] + drift * steps["old_log_prob"]
    steps["ref_log_prob"] = steps["log_prob"] + 0.3 * steps["ref_log_prob"]
    steps = {name: value * mask for name, value in steps.items()} | {"response_mask": mask}
    # Tool tokens and padding hold values no loss may read.
    garbage = torch.full((len(TRAJECTORIES), rows_width), 7.0)
    found = Batch({"response_mask": torch.zeros(len(TRAJECTORIES), rows_width)}, steps, places)
    on_steps = found.to_rows(mask).bool()
    found.rows = {name: torch.where(on_steps, found.to_rows(steps[name]), garbage) for name in FIELDS}
    found.rows["response_mask"] = on_steps.long()
    found.rows["response_length"] = torch.tensor(row_lengths)
    return found


def run_config(preset: str) -> RunConfig:
    n = PRESETS.get(preset).defaults["rollout.n"]
    settings = {"resources.gpus_per_node": 1, "optim.mini_batch_size": n}
    return RunConfig.from_preset(preset, backend="verl", **settings)


def actor_config(config: RunConfig) -> ActorConfig:
    """verl's ActorConfig as our command sets it (the actor overrides of ``overrides(config)``)."""
    prefix = "actor_rollout_ref.actor."
    dotlist = [
        item[len(prefix) :]
        for item in overrides(config, PATHS, project="p", run_name="r")
        if item.startswith(prefix)
    ]
    ours = OmegaConf.to_container(OmegaConf.from_dotlist(dotlist))
    assert isinstance(ours, dict)
    known = {field.name for field in fields(ActorConfig)}
    settings = {key: value for key, value in ours.items() if key in known and not isinstance(value, dict)}
    actor = ActorConfig(
        strategy="fsdp",
        rollout_n=config.rollout.n,
        policy_loss=PolicyLossConfig(**ours["policy_loss"]),
        **settings,
    )
    assert actor.policy_loss.loss_mode == verl_loss_name(config.algorithm.policy_loss)
    return actor


def packed(per_row: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """A [b, R] response tensor as verl's models return it: every sequence's prompt and response
    packed into one, each response value one position early (verl's padding.no_padding_2_padding)."""
    parts = []
    for row, length in enumerate(lengths.tolist()):
        parts += [per_row.new_zeros(PROMPT - 1), per_row[row, :length], per_row.new_zeros(1)]
    return torch.cat(parts)


def micro_batch(found: Batch, rows: list[int], tensors: dict[str, str], **info: Any) -> TensorDict:
    """One micro-batch as verl's engine hands it to a loss function; ``tensors``: verl's name → ours."""
    lengths = found.rows["response_length"][rows]
    width = found.rows["response_mask"].shape[1]
    responses = (torch.arange(width)[None, :] < lengths[:, None]).long()
    data = TensorDict(
        {
            "prompts": torch.zeros(len(rows), PROMPT, dtype=torch.long),
            "responses": torch.zeros(len(rows), width, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(len(rows), PROMPT, dtype=torch.long), responses], 1),
            "response_mask": found.rows["response_mask"][rows],
            **{theirs: found.rows[ours][rows] for theirs, ours in tensors.items()},
        },
        batch_size=[len(rows)],
    )
    tu.assign_non_tensor(data, **info)
    return data


ACTOR_INPUTS = {"old_log_probs": "old_log_prob", "advantages": "advantages", "ref_log_prob": "ref_log_prob"}
CRITIC_INPUTS = {"values": "old_values", "returns": "returns"}


def mini_batch_info(found: Batch) -> dict[str, Any]:
    """verl's global batch info: the mini-batch's tokens and rows (one data-parallel rank)."""
    tokens = int(found.rows["response_mask"].sum())
    return {"dp_size": 1, "batch_num_tokens": tokens, "global_batch_size": len(TRAJECTORIES)}


def verl_over_torch(found: Batch, agg_mode: str) -> float:
    """verl's mini-batch loss over ours (docs/verl.md#policy-losses): the seq modes divide by rows,
    we by steps."""
    return 1.0 if agg_mode == "token-mean" else len(found.places) / len(TRAJECTORIES)


def torch_actor_loss(
    algorithm: AlgorithmConfig, steps: dict[str, torch.Tensor], log_prob: torch.Tensor
) -> torch.Tensor:
    """The torch backend's actor loss of a mini-batch (its micro-batches add up to it): policy loss,
    plus the KL term when the KL is a loss (trainer.backends.torch.update.actor_micro_loss)."""
    mask, mode = steps["response_mask"], algorithm.loss_agg_mode
    loss, _ = POLICY_LOSSES.get(algorithm.policy_loss)(
        LossInputs(log_prob, steps["old_log_prob"], steps["advantages"], mask), loss_params(algorithm)
    )
    if algorithm.kl_mode == "loss" and algorithm.kl_coef > 0:
        loss = loss + algorithm.kl_coef * agg_loss(
            kl_penalty(log_prob, steps["ref_log_prob"], algorithm.kl_kind), mask, mode
        )
    return loss


@pytest.mark.parametrize("mode", AGG_MODES.names())
@pytest.mark.parametrize("preset", PRESETS.names())
def test_each_presets_actor_loss_on_verls_trajectory_rows_is_the_torch_loss_of_their_steps(
    preset: str, mode: str
) -> None:
    preset_config = run_config(preset)
    if mode == "seq-mean-token-mean" and preset_config.algorithm.kl_mode == "loss":
        # verl aggregates the KL term over rows, which this mode tells apart from steps: refused.
        with pytest.raises(ValueError, match="averages a KL loss over whole trajectories"):
            preset_config.with_overrides(**{"algorithm.loss_agg_mode": mode})
        return
    config = preset_config.with_overrides(**{"algorithm.loss_agg_mode": mode})
    found, actor = batch(), actor_config(config)
    assert actor.use_kl_loss == (config.algorithm.kl_mode == "loss")
    row_log_prob = found.rows["log_prob"].clone().requires_grad_(True)
    total = torch.zeros(())
    info = mini_batch_info(found)
    for rows in MICRO_BATCHES:
        data = micro_batch(found, rows, ACTOR_INPUTS, **info)
        lengths = found.rows["response_length"][rows]
        loss, metrics = ppo_loss(actor, {"log_probs": packed(row_log_prob[rows], lengths)}, data)
        assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_loss"} <= set(metrics)
        loss.backward()
        total = total + loss.detach()
    step_log_prob = found.steps["log_prob"].clone().requires_grad_(True)
    ours = torch_actor_loss(config.algorithm, found.steps, step_log_prob)
    ours.backward()
    factor = verl_over_torch(found, mode)
    torch.testing.assert_close(total, factor * ours.detach(), atol=1e-6, rtol=1e-5)
    assert row_log_prob.grad is not None and step_log_prob.grad is not None
    torch.testing.assert_close(
        row_log_prob.grad, factor * found.to_rows(step_log_prob.grad), atol=1e-6, rtol=1e-5
    )


def test_steppo_on_verl_takes_one_importance_ratio_per_step_not_per_trajectory() -> None:
    preset = next(name for name in PRESETS.names() if PRESETS.get(name).policy_loss == "gspo")
    config = run_config(preset)
    actor, found = actor_config(config), batch(1)
    mode, rows = actor.loss_agg_mode, found.rows
    results = []
    for name in (verl_loss_name("gspo"), "gspo"):  # ours, then verl's own per-row GSPO
        log_prob = rows["log_prob"].clone().requires_grad_(True)
        args = (rows["old_log_prob"], log_prob, rows["advantages"], rows["response_mask"].bool(), mode, actor)
        loss, _ = core_algos.get_policy_loss_fn(name)(*args)
        loss.backward()
        results.append((loss.detach(), log_prob.grad))
    step_log_prob = found.steps["log_prob"].clone().requires_grad_(True)
    ours = torch_actor_loss(config.algorithm, found.steps, step_log_prob)
    ours.backward()
    assert step_log_prob.grad is not None
    (steps_loss, steps_grad), (rows_loss, rows_grad) = results
    # Without batch info verl normalises each micro-batch by itself: our adapter then is the torch loss.
    torch.testing.assert_close(steps_loss, ours.detach(), atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(steps_grad, found.to_rows(step_log_prob.grad), atol=1e-7, rtol=1e-6)
    assert not torch.allclose(rows_loss, ours.detach(), rtol=1e-3)  # the data tells the two apart
    assert not torch.allclose(rows_grad, found.to_rows(step_log_prob.grad), rtol=1e-3)


@pytest.mark.parametrize("preset", [name for name in PRESETS.names() if PRESETS.get(name).use_critic])
def test_the_critics_loss_on_verls_rows_is_the_torch_value_loss_of_their_steps(preset: str) -> None:
    config = run_config(preset)
    mode = config.algorithm.loss_agg_mode
    defaults = OmegaConf.load(Path(trainer_base.__file__).parents[2] / "config" / "critic" / "critic.yaml")
    assert defaults.cliprange_value == VALUE_CLIP
    assert trainer_base.value_loss is verl_value_loss  # what the v1 trainer hands its critic workers
    critic = OmegaConf.create(
        {"cliprange_value": VALUE_CLIP, "loss_agg_mode": mode, "loss_scale_factor": None}
    )
    found = batch(2)
    row_values = found.rows["values"].clone().requires_grad_(True)
    info = mini_batch_info(found)
    total = torch.zeros(())
    for rows in MICRO_BATCHES:
        data = micro_batch(found, rows, CRITIC_INPUTS, **info)
        lengths = found.rows["response_length"][rows]
        loss, metrics = trainer_base.value_loss(critic, {"values": packed(row_values[rows], lengths)}, data)
        assert {"critic/vf_loss", "critic/vf_clipfrac"} <= set(metrics)
        loss.backward()
        total = total + loss.detach()
    step_values = found.steps["values"].clone().requires_grad_(True)
    steps = found.steps
    ours, _ = value_loss(
        step_values,
        steps["old_values"],
        steps["returns"],
        steps["response_mask"],
        clip=VALUE_CLIP,
        agg_mode=mode,
    )
    ours.backward()
    factor = verl_over_torch(found, mode)
    torch.testing.assert_close(total, factor * ours.detach(), atol=1e-6, rtol=1e-5)
    assert row_values.grad is not None and step_values.grad is not None
    torch.testing.assert_close(
        row_values.grad, factor * found.to_rows(step_values.grad), atol=1e-6, rtol=1e-5
    )


def test_our_token_mean_ppo_loss_is_verls_vanilla_on_the_same_rows() -> None:
    # For token-mean a per-token loss over the steps is the loss over the rows, so verl's own vanilla
    # would do; our adapter scales each micro-batch as verl does.
    actor, found = actor_config(run_config("grpo")), batch(3)
    actor.global_batch_info.update(mini_batch_info(found))
    for rows in MICRO_BATCHES:
        args = [found.rows[name][rows] for name in ("old_log_prob", "log_prob", "advantages")]
        mask = found.rows["response_mask"][rows].bool()
        ours, _ = core_algos.get_policy_loss_fn(verl_loss_name("vanilla"))(*args, mask, "token-mean", actor)
        theirs, _ = core_algos.get_policy_loss_fn("vanilla")(*args, mask, "token-mean", actor)
        torch.testing.assert_close(ours, theirs)


def test_a_rollout_correction_weight_is_refused_not_dropped() -> None:
    actor, found = actor_config(run_config("grpo")), batch()
    rows = found.rows
    with pytest.raises(ValueError, match="rollout_correction"):
        core_algos.get_policy_loss_fn(verl_loss_name("vanilla"))(
            rows["old_log_prob"],
            rows["log_prob"],
            rows["advantages"],
            rows["response_mask"],
            "token-mean",
            actor,
            torch.ones_like(rows["log_prob"]),
        )


# -- the update's per-token signals (trainer.backends.verl.losses.verl_ppo_loss) --------------------

MARKED = [0, 2, 3]  # the rows the driver marked for signals (signals.KEPT_FIELD)
REARRANGED = [[2, 0], [3, 1]]  # micro-batches of the mini-batch's rows, out of order


def identified(found: Batch, rows: list[int], **info: Any) -> TensorDict:
    """An actor micro-batch as verl's worker has it: every TransferQueue field of its rows, so also the
    prompt uid and session id (stacks of Python values) and the driver's mark."""
    data = micro_batch(found, rows, ACTOR_INPUTS, **info)
    data["uid"] = NonTensorStack(*[f"prompt_{row // 2}" for row in rows])
    data["session_id"] = NonTensorStack(*[row % 2 for row in rows])
    data[signals.KEPT_FIELD] = torch.tensor([int(row in MARKED) for row in rows], dtype=torch.int8)
    return data


@pytest.mark.parametrize("policy_loss", POLICY_LOSSES.names())
def test_the_actor_update_sends_each_marked_steps_ratio_and_clip_as_the_torch_loss_computes_them(
    policy_loss: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = MemoryReporter()
    monkeypatch.setattr(signals, "run_reporter", lambda: memory)
    preset = next(name for name in PRESETS.names() if PRESETS.get(name).policy_loss == policy_loss)
    config = run_config(preset)
    actor, found = actor_config(config), batch(4)
    assert engine_workers.ppo_loss is verl_ppo_loss  # what the actor workers build their loss from
    info = mini_batch_info(found)
    mini_batch = identified(found, list(range(len(TRAJECTORIES))), **info)
    for (
        rows
    ) in REARRANGED:  # split as verl's engine does with dynamic batch sizes (tu.index_select_tensor_dict)
        lengths = found.rows["response_length"][rows]
        output = {"log_probs": packed(found.rows["log_prob"][rows], lengths)}
        loss, _ = verl_ppo_loss(actor, output, tu.index_select_tensor_dict(mini_batch, rows))
        plain, _ = ppo_loss(actor, output, micro_batch(found, rows, ACTOR_INPUTS, **info))
        torch.testing.assert_close(loss, plain)  # the loss itself is verl's, untouched
    expected: dict[str, torch.Tensor] = {}
    algorithm = config.algorithm
    names = ("log_prob", "old_log_prob", "advantages", "response_mask")
    inputs = LossInputs(*(found.steps[name] for name in names), token_out=expected)
    POLICY_LOSSES.get(policy_loss)(inputs, loss_params(algorithm))
    sent = {(s.trajectory_id, s.step_index): s for batch_ in memory.token_signals for s in batch_}
    wanted = {}
    for step, (row, _, length) in enumerate(found.places):
        index = sum(1 for other, _, _ in found.places[:step] if other == row)
        if row in MARKED:
            wanted[(signals.trajectory_id(f"prompt_{row // 2}", row % 2), index)] = (step, length)
    assert set(sent) == set(wanted)
    for key, (step, length) in wanted.items():
        wire = sent[key]
        assert wire.token_signals.tokens is None and wire.advantage is None  # the driver sent those
        values = wire.token_signals.decoded()
        assert sorted(values) == ["clipped", "ratio"]
        torch.testing.assert_close(torch.tensor(values["ratio"]), expected["ratio"][step, :length])
        torch.testing.assert_close(torch.tensor(values["clipped"]), expected["clipped"][step, :length])
    if policy_loss == "vanilla":  # the batch has clipped tokens and unclipped ones
        assert 0 < float(expected["clipped"].sum()) < float(found.steps["response_mask"].sum())


def test_an_unmarked_micro_batch_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = MemoryReporter()
    monkeypatch.setattr(signals, "run_reporter", lambda: memory)
    actor, found = actor_config(run_config("grpo")), batch()
    rows = MICRO_BATCHES[0]
    output = {"log_probs": packed(found.rows["log_prob"][rows], found.rows["response_length"][rows])}
    verl_ppo_loss(actor, output, micro_batch(found, rows, ACTOR_INPUTS, **mini_batch_info(found)))
    data = identified(found, rows, **mini_batch_info(found))
    data[signals.KEPT_FIELD] = torch.zeros(len(rows), dtype=torch.int8)
    verl_ppo_loss(actor, output, data)
    assert memory.token_signals == []
