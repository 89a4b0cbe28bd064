"""Our estimators as verl runs them: trajectory rows → StepBatch → ESTIMATORS → rows, registered in verl.

The math is trainer.algos.advantages' (tested there); these tests check the adapter and that verl's
own dispatch reaches it: hand-computed rows, equality with verl's core_algos where verl has the same
estimator, the hook that adds critic values and anchor ids, and one batch of agent-loop rollouts that
gives every step the same advantage on both backends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scripted_loop import CALL, SAMPLING, BonusTool, ScriptedServer, make_loop, verl_sample
from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from trainer.algos.advantages import ESTIMATORS, EstimatorParams
from trainer.backends.torch.batch import flatten
from trainer.backends.verl import signals, worker
from trainer.backends.verl.command import compose
from trainer.backends.verl.estimators import (
    ANCHOR_FIELD,
    VERL_ESTIMATORS,
    install,
    step_batch,
    step_layout,
    with_step_inputs,
)
from trainer.config import RunConfig
from trainer.mdp import Trajectory
from trainer.report.reporters import MemoryReporter
from trainer.tools import TOOLS

# Row A: step 0 = tokens 0-1 (reward 0.5), tool tokens 2-3, step 1 = tokens 4-5 (reward 1), padding.
MASK_A = [1, 1, 0, 0, 1, 1, 0]
REWARD_A = [0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 0.0]
# Row B: one step of three tokens, reward 0.
MASK_B = [1, 1, 1, 0, 0, 0, 0]
REWARD_B = [0.0] * 7
ALGO = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True})
HALF = 1 / math.sqrt(2)


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    install()


def rows() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([REWARD_A, REWARD_B]), torch.tensor([MASK_A, MASK_B])


def test_steps_are_the_runs_of_model_tokens_and_a_reward_between_steps_counts_for_the_one_before() -> None:
    rewards, mask = rows()
    rewards[0, 3] = 0.25  # on a tool token after step 0
    layout = step_layout(mask)
    batch = step_batch(layout, rewards, np.array(["u", "v"], dtype=object))
    assert layout.row.tolist() == [0, 0, 1] and layout.start.tolist() == [0, 4, 0]
    assert batch.response_mask.tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1]]
    assert batch.token_rewards.tolist() == [[0.0, 0.75, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    assert batch.traj_index.tolist() == [0, 0, 1]
    assert batch.group_index[0] == batch.group_index[1] != batch.group_index[2]


def test_single_step_rows_are_the_steps_and_a_reward_on_padding_still_counts() -> None:
    rewards = torch.tensor([[0.0, 0.5, 0.25], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    before = rewards.clone()
    layout = step_layout(mask)
    assert layout.flat is None  # nothing to move: each row is one step from its first token
    advantages, returns = VERL_ESTIMATORS["agent_r1_reinforce"](rewards, mask, index=["u", "v"], config=ALGO)
    assert returns.tolist() == [[0.75, 0.75, 0.0], [1.0, 0.0, 0.0]]
    assert advantages[0, 2] == 0 and advantages[1, 1:].abs().sum() == 0
    assert torch.equal(rewards, before)  # verl's tensor is read, never written


def test_a_row_without_model_tokens_has_no_step_and_gets_no_advantage() -> None:
    rewards = torch.tensor([REWARD_A, [0.0] * 7])
    mask = torch.tensor([MASK_A, [0] * 7])
    advantages, returns = VERL_ESTIMATORS["agent_r1_reinforce"](rewards, mask, index=["u", "u"], config=ALGO)
    assert advantages[1].abs().sum() == 0 and returns[1].abs().sum() == 0
    assert returns[0].tolist() == [1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0]


def test_step_reinforce_whitens_the_discounted_step_returns_over_all_step_rows() -> None:
    rewards, mask = rows()
    advantages, returns = core_algos.get_adv_estimator_fn("agent_r1_reinforce")(
        token_level_rewards=rewards, response_mask=mask, index=np.array(["u", "v"], dtype=object), config=ALGO
    )
    # G = [1.5, 1.0] and [0.0]: mean 5/6, unbiased std sqrt(7/12).
    std = math.sqrt(7 / 12)
    expected = [(1.5 - 5 / 6) / std, (1.0 - 5 / 6) / std, (0.0 - 5 / 6) / std]
    assert advantages[0, :2].tolist() == pytest.approx([expected[0]] * 2, abs=1e-5)
    assert advantages[0, 4:6].tolist() == pytest.approx([expected[1]] * 2, abs=1e-5)
    assert advantages[1, :3].tolist() == pytest.approx([expected[2]] * 3, abs=1e-5)
    assert advantages[0, 2:4].tolist() == [0.0, 0.0]  # tool tokens carry no advantage
    assert returns[0].tolist() == [1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0]


def gigpo_config(weight: float) -> Any:
    """verl's algorithm config exactly as our command composes it for a GiGPO run."""
    config = RunConfig.from_preset(
        "gigpo",
        backend="verl",
        executor="ray",
        **{"resources.gpus_per_node": 1, "optim.mini_batch_size": 8, "algorithm.gigpo_step_weight": weight},
    )
    return compose(config).algorithm


def test_gigpo_groups_steps_by_anchor_and_takes_its_weight_from_the_composed_config() -> None:
    rewards, mask = rows()
    # Both rows start from the prompt (anchor 11); row A's second step has an anchor of its own.
    anchors = torch.tensor([[11, 11, 0, 0, 12, 12, 0], [11, 11, 11, 0, 0, 0, 0]])
    advantages, _ = VERL_ESTIMATORS["agent_r1_gigpo"](
        rewards, mask, index=np.array(["u", "u"], dtype=object), config=gigpo_config(0.5), anchors=anchors
    )
    # Episode: R = 1.5 and 0 -> ±1/sqrt(2). Anchor 11: G = 1.5 and 0 -> ±1/sqrt(2); anchor 12 alone -> 0.
    assert advantages[0, 0].item() == pytest.approx(HALF + 0.5 * HALF, abs=1e-5)
    assert advantages[0, 4].item() == pytest.approx(HALF, abs=1e-5)
    assert advantages[1, 0].item() == pytest.approx(-HALF - 0.5 * HALF, abs=1e-5)


def test_gigpo_keeps_steps_at_the_same_position_apart_when_their_observations_differ() -> None:
    # Two two-step rows of one prompt: same first observation, different second ones.
    mask = torch.tensor([MASK_A, MASK_A])
    rewards = torch.tensor([REWARD_A, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    anchors = torch.tensor([[1, 1, 0, 0, 2, 2, 0], [1, 1, 0, 0, 3, 3, 0]])
    advantages, _ = VERL_ESTIMATORS["agent_r1_gigpo"](
        rewards, mask, index=["u", "u"], config=ALGO, anchors=anchors
    )
    # Episode ±1/sqrt(2); anchor 1: G = 1.5 and 0 -> ±1/sqrt(2); anchors 2 and 3 hold one step each -> 0.
    # Grouping by (prompt, step index) would have put both second steps in one group instead.
    assert advantages[:, 0].tolist() == pytest.approx([2 * HALF, -2 * HALF], abs=1e-5)
    assert advantages[:, 4].tolist() == pytest.approx([HALF, -HALF], abs=1e-5)


def test_step_gae_uses_the_value_at_each_steps_first_token() -> None:
    rewards, mask = torch.tensor([REWARD_A]), torch.tensor([MASK_A])
    values = torch.tensor([[0.2, 9.0, 9.0, 9.0, 0.6, 9.0, 9.0]])  # 9s: values that must not be read
    advantages, returns = VERL_ESTIMATORS["agent_r1_gae"](
        rewards, mask, index=["u"], config=ALGO, values=values
    )
    # delta_1 = 1 - 0.6 = 0.4; delta_0 = 0.5 + 0.6 - 0.2 = 0.9; A = [1.3, 0.4]; G = A + V = [1.5, 1.0].
    assert returns[0].tolist() == pytest.approx([1.5, 1.5, 0.0, 0.0, 1.0, 1.0, 0.0])
    assert advantages[0, 0].item() == pytest.approx(HALF, abs=1e-5)  # whitened [1.3, 0.4]
    assert advantages[0, 4].item() == pytest.approx(-HALF, abs=1e-5)


@pytest.mark.parametrize("name", ["gae", "token_gae"])
def test_critic_estimators_refuse_rows_without_values(name: str) -> None:
    rewards, mask = rows()
    with pytest.raises(ValueError, match="needs critic values"):
        VERL_ESTIMATORS[f"agent_r1_{name}"](rewards, mask, index=["u", "v"], config=ALGO)


# -- verl's registry and the hook -------------------------------------------------------------------


def test_install_registers_every_estimator_and_wraps_verls_advantage_step_once() -> None:
    install()  # a second worker import must not fail or wrap twice
    assert set(VERL_ESTIMATORS) == {f"agent_r1_{name}" for name in ESTIMATORS.names()}
    for verl_name, estimator in VERL_ESTIMATORS.items():
        assert core_algos.get_adv_estimator_fn(verl_name) is estimator
    step = trainer_base.compute_advantage_for_multi_trajectories
    assert step.agent_r1 and step is not compute_advantage_for_multi_trajectories
    # verl's own GAE is left alone: our critic estimators are reached through the advantage step.
    assert core_algos.compute_gae_advantage_return.__module__ == "verl.trainer.ppo.core_algos"


def verl_data(
    rewards: torch.Tensor, mask: torch.Tensor, uids: list[str], values: torch.Tensor | None = None
) -> Any:
    """The DataProto verl v1's advantage step works on (after its KL-in-reward step)."""
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    if values is not None:
        tensors["values"] = values
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})


def test_the_hook_hands_critic_values_and_anchor_ids_to_our_estimators_only() -> None:
    rewards, mask = rows()
    values = torch.tensor([[0.2, 0.3, 0.0, 0.0, 0.6, 0.7, 0.0], [0.1, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0]])
    anchors = torch.tensor([[11, 11, 0, 0, 12, 12, 0], [11, 11, 11, 0, 0, 0, 0]])
    asked: list[list[str]] = []

    def anchors_for(keys: Any) -> torch.Tensor:
        asked.append(list(keys))
        return anchors

    step = with_step_inputs(compute_advantage_for_multi_trajectories, anchors_for)
    keys = ["u_0_0", "u_1_0"]
    for name in ESTIMATORS.names():
        data = step(verl_data(rewards, mask, ["u", "u"], values), batch_keys=keys,
                    adv_estimator=f"agent_r1_{name}", config=ALGO)  # fmt: skip
        expected, _ = VERL_ESTIMATORS[f"agent_r1_{name}"](
            rewards, mask, index=["u", "u"], config=ALGO, values=values, anchors=anchors
        )
        torch.testing.assert_close(data.batch["advantages"], expected)
    assert asked == [keys]  # only GiGPO reads anchors
    # verl's own estimators still take verl's path.
    data = step(
        verl_data(rewards, mask, ["u", "v"], values), batch_keys=keys, adv_estimator="gae", config=ALGO
    )
    theirs, _ = core_algos.compute_gae_advantage_return(rewards, values, mask, 1.0, 1.0)
    torch.testing.assert_close(data.batch["advantages"], theirs)


def test_the_hook_refuses_anchor_ids_that_do_not_line_up_with_the_rows() -> None:
    rewards, mask = rows()
    step = with_step_inputs(compute_advantage_for_multi_trajectories, lambda keys: torch.zeros(2, 5))
    with pytest.raises(ValueError, match="did not come from our agent loop"):
        step(
            verl_data(rewards, mask, ["u", "u"]),
            batch_keys=["a", "b"],
            adv_estimator="agent_r1_gigpo",
            config=ALGO,
        )


# -- equality with verl's own estimators, through verl's dispatch -----------------------------------


def one_step_rows(seed: int, rows: int, width: int, *, gaps: bool) -> tuple[torch.Tensor, ...]:
    """verl rows with the reward on the last model token; ``gaps`` puts tool tokens inside rows."""
    gen = torch.Generator().manual_seed(seed)
    if gaps:
        mask = (torch.rand(rows, width, generator=gen) < 0.8).long()
        mask[:, 0] = 1
    else:
        lengths = torch.randint(1, width + 1, (rows,), generator=gen)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    last = width - 1 - mask.flip(-1).argmax(-1)
    rewards = torch.zeros(rows, width)
    rewards[torch.arange(rows), last] = torch.randn(rows, generator=gen)
    return rewards, mask, torch.randn(rows, width, generator=gen)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_equals_verls(norm: bool) -> None:
    # Groups of 5 only: verl gives a lone sample R / (1 + eps) where ours gives 0 (docs/verl.md#advantages).
    rewards, mask, _ = one_step_rows(0, rows=60, width=9, gaps=False)
    uids = [f"p{i // 5}" for i in range(60)]
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
    ours = compute_advantage(verl_data(rewards, mask, uids), "agent_r1_grpo", config=config).batch[
        "advantages"
    ]
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        rewards.clone(), mask, np.array(uids, dtype=object), norm_adv_by_std_in_grpo=norm
    )
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_rloo_equals_verls() -> None:
    rewards, mask, _ = one_step_rows(1, rows=61, width=9, gaps=False)  # the last group has one sample
    uids = [f"p{i // 4}" for i in range(61)]
    ours = compute_advantage(verl_data(rewards, mask, uids), "agent_r1_rloo", config=ALGO).batch["advantages"]
    theirs, _ = core_algos.compute_rloo_outcome_advantage(rewards.clone(), mask, np.array(uids, dtype=object))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("gamma", "lam", "gaps"), [(1.0, 1.0, False), (0.99, 0.95, False), (0.9, 0.7, True)])
def test_token_gae_equals_verls_gae_also_across_the_steps_of_a_row(
    gamma: float, lam: float, gaps: bool
) -> None:
    # With gaps a row holds many steps: verl's GAE skips the tool tokens, as token_gae chains steps.
    rewards, mask, values = one_step_rows(2, rows=40, width=150, gaps=gaps)
    config = OmegaConf.create({"gamma": gamma, "lam": lam})
    step = trainer_base.compute_advantage_for_multi_trajectories
    data = step(verl_data(rewards, mask, [f"p{i}" for i in range(40)], values),
                batch_keys=[], adv_estimator="agent_r1_token_gae", config=config)  # fmt: skip
    theirs_adv, theirs_ret = core_algos.compute_gae_advantage_return(rewards, values, mask, gamma, lam)
    # verl leaves carried values on tool tokens and padding; ours are 0 there. Compare model tokens.
    on = mask > 0
    torch.testing.assert_close(data.batch["advantages"][on], theirs_adv[on], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(data.batch["returns"][on], theirs_ret[on], atol=1e-4, rtol=1e-4)


# -- one batch of rollouts, both backends ----------------------------------------------------------

# (prompt uid, question, the scripted responses of one sample). Samples 0 and 1 of p1 call the tool
# alike, so their second steps share an observation; sample 2's call differs; sample 3 answers at once.
SCRIPTS = [
    ("p1", "What is 2 + 2?", [CALL, "The answer is 4"]),
    ("p1", "What is 2 + 2?", [CALL, "5"]),
    ("p1", "What is 2 + 2?", [CALL.replace("hi", "there"), "4"]),
    ("p1", "What is 2 + 2?", ["4"]),
    ("p2", "What is 3 + 1?", [CALL, "4"]),
    ("p2", "What is 3 + 1?", ["no idea"]),
]


@pytest.fixture(scope="module")
def rollouts(
    smol_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[dict[str, Any]], list[Trajectory]]]:
    """The rows our verl agent loop outputs for SCRIPTS, and the trajectories it reported."""
    memory = MemoryReporter()
    worker.set_reporter(memory)
    TOOLS.add("bonus", BonusTool)
    try:
        outputs = []
        for session, (uid, question, texts) in enumerate(SCRIPTS):
            loop = make_loop(
                tmp_path_factory.mktemp("loop"), smol_tokenizer, ScriptedServer(smol_tokenizer, texts)
            )
            sample = verl_sample(question, uid=uid, session_id=session)
            outputs.append(asyncio.run(loop.run(dict(SAMPLING), **sample)).as_dict())
    finally:
        TOOLS.unregister("bonus")
        worker.set_reporter(None)
    yield outputs, [trajectory for _, batch in memory.trajectories for trajectory in batch]


def runs(mask_row: torch.Tensor) -> list[tuple[int, int]]:
    """The steps of one verl row: (start, end) of each run of model tokens."""
    spans, start = [], None
    for position, value in enumerate([*mask_row.tolist(), 0]):
        if value and start is None:
            start = position
        elif not value and start is not None:
            spans.append((start, position))
            start = None
    return spans


def pad(outputs: list[dict[str, Any]], field: str) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence([output[field] for output in outputs], batch_first=True)


# Per-token inputs as a function of (trajectory, step, token): a critic's value and a per-token
# reward term (a KL penalty in the reward, say), identical on both backends.
def value(i: int, k: int, j: int) -> float:
    return 0.3 * i - 0.2 * k + 0.01 * j


def shaping(i: int, k: int, j: int) -> float:
    return -0.01 * ((i + k + j) % 3)


@pytest.mark.parametrize("name", ESTIMATORS.names())
def test_both_backends_give_every_step_of_one_batch_the_same_advantage(
    name: str, rollouts: tuple[list[dict[str, Any]], list[Trajectory]]
) -> None:
    outputs, trajectories = rollouts
    params = EstimatorParams(gamma=0.9, lam=0.8, norm_adv_by_std=True, step_weight=0.5)

    # torch: the StepBatch the torch backend builds from the trajectories.
    steps = flatten(trajectories)
    token_rewards, values = steps.token_rewards(), torch.zeros_like(steps.response_mask)
    row = 0
    for i, trajectory in enumerate(trajectories):
        for k, step in enumerate(trajectory.steps):
            for j in range(len(step.response_ids)):
                token_rewards[row, j] += shaping(i, k, j)
                values[row, j] = value(i, k, j)
            row += 1
    torch_adv, torch_ret = ESTIMATORS.get(name)(steps.step_batch(token_rewards, values), params)

    # verl: the agent loop's rows through verl's advantage step with our hook installed.
    mask, rewards = pad(outputs, "response_mask"), pad(outputs, "rm_scores")
    verl_values = torch.zeros_like(rewards)
    for i in range(len(outputs)):
        for k, (start, end) in enumerate(runs(mask[i])):
            for j in range(end - start):
                rewards[i, start + j] += shaping(i, k, j)
                verl_values[i, start + j] = value(i, k, j)
    config = OmegaConf.create({"gamma": 0.9, "lam": 0.8, "norm_adv_by_std_in_grpo": True,
                               "agent_r1": {"gigpo_step_weight": 0.5}})  # fmt: skip
    uids = [uid for uid, _, _ in SCRIPTS]
    step = with_step_inputs(compute_advantage_for_multi_trajectories, lambda keys: pad(outputs, ANCHOR_FIELD))
    data = step(verl_data(rewards, mask, uids, verl_values),
                batch_keys=[f"{uid}_{s}_0" for s, uid in enumerate(uids)],
                adv_estimator=f"agent_r1_{name}", config=config)  # fmt: skip

    row = 0
    for i, trajectory in enumerate(trajectories):
        on = mask[i] > 0
        lengths = [len(step.response_ids) for step in trajectory.steps]
        ours = torch.cat([torch_adv[row + k, :length] for k, length in enumerate(lengths)])
        returns = torch.cat([torch_ret[row + k, :length] for k, length in enumerate(lengths)])
        torch.testing.assert_close(data.batch["advantages"][i][on], ours, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(data.batch["returns"][i][on], returns, atol=1e-5, rtol=1e-5)
        row += len(lengths)


def test_the_rollouts_give_gigpo_anchor_groups_beyond_the_first_step(
    rollouts: tuple[list[dict[str, Any]], list[Trajectory]],
) -> None:
    outputs, trajectories = rollouts
    second = [trajectory.steps[1].anchor_id for trajectory in trajectories[:3]]
    assert second[0] == second[1] != second[2]  # the same tool call, then a different one
    first_tokens = [output[ANCHOR_FIELD][0].item() for output in outputs]
    assert first_tokens[:4] == [trajectories[0].steps[0].anchor_id] * 4  # one prompt, one anchor
    assert first_tokens[4] != first_tokens[0]


# -- per-token signals from the driver (trainer.backends.verl.signals) -------------------------------


@pytest.fixture
def smol_decoder(smol_tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver decodes token texts with SmolLM2's tokenizer (ours is read from its GGUF, not a path)."""
    monkeypatch.setattr(
        signals, "token_decoder", lambda path: lambda ids: smol_tokenizer.batch_decode([[t] for t in ids])
    )


def test_the_hook_sends_every_steps_token_signals_under_the_id_the_agent_loop_reported(
    rollouts: tuple[list[dict[str, Any]], list[Trajectory]], smol_tokenizer: Any, smol_decoder: None
) -> None:
    outputs, trajectories = rollouts
    mask, rewards, rollout = (
        pad(outputs, "response_mask"),
        pad(outputs, "rm_scores"),
        pad(outputs, "rollout_log_probs"),
    )
    old, ref = rollout + 0.01, rollout - 0.3 * mask  # the actor's pass, the reference's
    entropy = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0))
    data = verl_data(rewards, mask, [uid for uid, _, _ in SCRIPTS])
    for name, value_ in (("rollout_log_probs", rollout), ("old_log_probs", old), ("ref_log_prob", ref)):
        data.batch[name] = value_
    keys = [f"{uid}_{s}_0" for s, (uid, _, _) in enumerate(SCRIPTS)]
    asked: list[tuple[list[str], tuple[str, ...]]] = []

    def fetch(rows: Any, names: Any) -> dict[str, torch.Tensor]:
        asked.append((list(rows), tuple(names)))
        picked = [keys.index(key) for key in rows]
        return {"responses": pad(outputs, "responses")[picked], "entropy": entropy[picked]}

    memory, marked = MemoryReporter(), []
    config = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, "kl_penalty": "k1",
                               "agent_r1": {"token_signals": "all", "tokenizer": "smol"}})  # fmt: skip
    step = with_step_inputs(
        compute_advantage_for_multi_trajectories,
        fetch=fetch,
        mark=lambda rows, flags: marked.append((list(rows), flags.tolist())),
        reporter_for=lambda: memory,
    )
    data = step(data, batch_keys=keys, adv_estimator="agent_r1_grpo", config=config)

    assert asked == [(keys, ("responses", "entropy"))]
    assert marked == [(keys, [1] * len(keys))]  # for the actor workers' ratio and clip
    [sent] = memory.token_signals
    assert [(s.trajectory_id, s.step_index) for s in sent] == [
        (t.id, k) for t in trajectories for k in range(len(t.steps))
    ]
    by_key = {(s.trajectory_id, s.step_index): s for s in sent}
    for i, trajectory in enumerate(trajectories):
        for k, ((start, end), step_) in enumerate(zip(runs(mask[i]), trajectory.steps, strict=True)):
            wire = by_key[(trajectory.id, k)]
            values = wire.token_signals.decoded()
            assert wire.token_signals.tokens == smol_tokenizer.batch_decode([[t] for t in step_.response_ids])
            assert sorted(values) == ["advantage", "entropy", "kl", "log_prob"]
            torch.testing.assert_close(
                torch.tensor(values["advantage"]), data.batch["advantages"][i, start:end]
            )
            torch.testing.assert_close(
                torch.tensor(values["log_prob"]), torch.tensor(step_.rollout_log_probs)
            )
            torch.testing.assert_close(torch.tensor(values["entropy"]), entropy[i, start:end])
            torch.testing.assert_close(
                torch.tensor(values["kl"]), torch.full((end - start,), 0.31)
            )  # k1: old - ref
            assert wire.advantage == pytest.approx(float(data.batch["advantages"][i, start:end].mean()))


def test_a_sampled_run_sends_a_few_trajectories_and_none_sends_nothing(
    rollouts: tuple[list[dict[str, Any]], list[Trajectory]], smol_decoder: None
) -> None:
    outputs, _ = rollouts
    mask = pad(outputs, "response_mask")
    keys = [f"{uid}_{s}_0" for s, (uid, _, _) in enumerate(SCRIPTS)]

    def fetch(rows: Any, names: Any) -> dict[str, torch.Tensor]:
        if "entropy" in names:
            raise KeyError("entropy")  # verl's bypass mode stores none
        return {"responses": pad(outputs, "responses")[[keys.index(key) for key in rows]]}

    marked: list[list[int]] = []

    def sent(policy: str) -> list[Any]:
        memory = MemoryReporter()
        config = OmegaConf.create(
            {"agent_r1": {"token_signals": policy, "token_signals_per_step": 2, "tokenizer": "smol"}}
        )
        step = with_step_inputs(
            compute_advantage_for_multi_trajectories,
            fetch=fetch,
            mark=lambda rows, flags: marked.append(flags.tolist()),
            reporter_for=lambda: memory,
        )
        step(verl_data(pad(outputs, "rm_scores"), mask, [uid for uid, _, _ in SCRIPTS]), batch_keys=keys,
             adv_estimator="agent_r1_grpo", config=config)  # fmt: skip
        return [s for batch in memory.token_signals for s in batch]

    # Two of six, spread over the batch: rows 0 and 3; without entropy in TransferQueue, the rest.
    sampled = sent("sample")
    assert {s.trajectory_id for s in sampled} == {
        signals.trajectory_id_of_key(keys[0]),
        signals.trajectory_id_of_key(keys[3]),
    }
    assert all(sorted(s.token_signals.signals) == ["advantage"] for s in sampled)
    assert marked == [[1, 0, 0, 1, 0, 0]]
    assert sent("none") == []
    assert len(marked) == 1  # nothing kept, nothing marked


def test_a_trajectory_id_survives_underscores_in_the_prompt_uid() -> None:
    assert (
        signals.trajectory_id_of_key("my_prompt_uid_3_0")
        == signals.trajectory_id("my_prompt_uid", 3)
        == "my_prompt_uid-s3"
    )
