"""Reward goes up: each algorithm teaches a tiny random model a task whose reward depends on its response.

The task: reward 1 when the first response token lies in a fixed set S holding 30% of the vocabulary
(the tokens whose embedding points along a random direction), else 0. Chance is about 0.3; the model
must move probability mass onto S. A run stops itself once the mean reward over three steps is ≥ 0.9
(through ``stop_event``, so cancellation is exercised too), or fails after ``MAX_STEPS``.

GiGPO plays it in two rounds: each round's first token earns half the reward, and the second round
asks the same question again whatever the first answer was, so the second steps of a prompt's
samples share one observation (GiGPO's anchor groups beyond the prompt itself).
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trainer.backends.torch.loop import train
from trainer.config import RunConfig
from trainer.envs import ENVS, AgentEnv, prompt_messages
from trainer.mdp import Action, Observation
from trainer.models import VALUE_HEAD_FILE, load_policy
from trainer.registry import Registry
from trainer.report.reporters import MemoryReporter

MAX_STEPS = 40
TARGET = 0.9


class StopWhenLearned(MemoryReporter):
    """Sets the stop event once the mean reward of the last three steps reaches the target."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        super().log_metrics(step, metrics)
        rewards = [value for _, value in self.series("reward/mean")]
        if len(rewards) >= 3 and statistics.fmean(rewards[-3:]) >= TARGET:
            self.stop.set()


@pytest.fixture(scope="module")
def good_tokens(sharp_tiny_model_dir: Path) -> set[int]:
    embeddings = load_policy(sharp_tiny_model_dir).get_input_embeddings().weight.detach()
    direction = torch.randn(embeddings.shape[1], generator=torch.Generator().manual_seed(0))
    projection = embeddings @ direction
    return set(torch.nonzero(projection > projection.quantile(0.7)).squeeze(-1).tolist())


@pytest.fixture
def first_token_env(temp_register: Callable[[Registry[Any], str, Any], Any], good_tokens: set[int]) -> str:
    class FirstTokenEnv(AgentEnv):
        def reset(self, **row: Any) -> Observation:
            return Observation(messages=prompt_messages(row))

        async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
            return Observation(messages=[]), float(action.token_ids[0] in good_tokens), True, {}

    temp_register(ENVS, "first_token", FirstTokenEnv)
    return "first_token"


@pytest.fixture
def two_round_env(temp_register: Callable[[Registry[Any], str, Any], Any], good_tokens: set[int]) -> str:
    class TwoRoundEnv(AgentEnv):
        def reset(self, **row: Any) -> Observation:
            self.messages = prompt_messages(row)
            self.round = 0
            return Observation(messages=self.messages)

        async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
            self.round += 1
            reward = 0.5 * float(action.token_ids[0] in good_tokens)
            again = [*self.messages, {"role": "user", "content": "Once more."}]
            return Observation(messages=again), reward, self.round == 2, {}

    temp_register(ENVS, "two_rounds", TwoRoundEnv)
    return "two_rounds"


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["grpo", "rloo", "reinforce", "ppo", "steppo", "gigpo"])
def test_each_algorithm_lifts_reward_from_chance_to_target(
    preset: str,
    sharp_tiny_model_dir: Path,
    first_token_env: str,
    two_round_env: str,
    rows_file: Callable[..., Path],
    tmp_path: Path,
) -> None:
    rounds = 2 if preset == "gigpo" else 1
    # StepPO updates in two mini-batches: the second one's step ratios move off 1 and GSPO's clip
    # (3e-4 / 4e-4) acts; in one on-policy mini-batch GSPO's gradient is PPO's.
    mini_batch = 8 if preset == "steppo" else 16
    config = RunConfig.from_preset(
        preset,
        **{
            "model.path": str(sharp_tiny_model_dir),
            "data.train_path": str(rows_file("train.parquet", 8, "first_token")),
            "data.max_prompt_length": 256,
            "rollout.n": 4,
            "rollout.max_new_tokens": 2,
            "rollout.max_steps": rounds,
            "rollout.env_type": two_round_env if rounds == 2 else first_token_env,
            "trainer.batch_size": 4,
            "trainer.total_steps": MAX_STEPS,
            "trainer.device": "cpu",
            "trainer.checkpoint_dir": str(tmp_path / "checkpoints"),
            "trainer.checkpoint_on_cancel": True,  # stopped once learned: its weights are read below
            "optim.lr": 1e-2,
            "optim.critic_lr": 1e-2,
            "optim.weight_decay": 0.0,  # so every change below comes from a gradient
            "optim.mini_batch_size": mini_batch,
            "optim.micro_batch_size": 16,
            "algorithm.skip_zero_advantage_groups": True,
        },
    )
    stop = threading.Event()
    reporter = StopWhenLearned(stop)

    result = train(config, reporter, stop_event=stop)

    rewards = [value for _, value in reporter.series("reward/mean")]
    assert rewards[0] <= 0.5, f"the untrained model should be near chance (0.3), got {rewards[0]}"
    assert statistics.fmean(rewards[-3:]) >= TARGET, (
        f"{preset} did not learn within {MAX_STEPS} steps: {rewards}"
    )
    assert result.status == "cancelled" and result.checkpoint is not None
    before, after = weights(sharp_tiny_model_dir), weights(result.checkpoint / "policy")
    unchanged = [name for name, tensor in before.items() if torch.equal(tensor, after[name])]
    assert not unchanged, f"{preset} left parameters untouched: {unchanged}"
    if preset == "steppo":
        assert max(value for _, value in reporter.series("actor/clipfrac")) > 0
    if preset == "gigpo":
        # A prompt's second steps share an anchor observation; a prompt's first steps share another.
        for _, trajectories in reporter.trajectories:
            for group in range(0, len(trajectories), config.rollout.n):
                samples = trajectories[group : group + config.rollout.n]
                assert len({(t.steps[0].anchor_id, t.steps[1].anchor_id) for t in samples}) == 1
    if config.use_critic:
        critic = weights(result.checkpoint / "critic")
        backbone = {name.removeprefix("model."): tensor for name, tensor in before.items()}
        unchanged = [name for name, tensor in critic.items() if torch.equal(tensor, backbone[name])]
        assert not unchanged, f"the critic left parameters untouched: {unchanged}"
        head = torch.load(result.checkpoint / "critic" / VALUE_HEAD_FILE, weights_only=True)
        assert reporter.series("critic/value_loss") and head["weight"].abs().sum() > 0
