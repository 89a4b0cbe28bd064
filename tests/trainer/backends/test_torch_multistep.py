"""Multi-step: a tool call then an answer, through the real flow, env and tool-call parser.

A scripted LLM makes the run deterministic; the tiny policy scores its tokens for the update. Group of
three samples of one prompt ("what is the code in box 7?"):
  0: calls open_box(box=7) correctly (tool reward 0.25), then answers 4242 (reward 1) → R = 1.25
  1: answers at once, wrongly → R = 0
  2: writes a malformed tool call (tool step reward 0), then answers wrongly → R = 0
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.backends.torch.batch import flatten
from trainer.backends.torch.rollout import rollout
from trainer.backends.torch.update import Models, estimate_advantages, update_policy
from trainer.config import RunConfig
from trainer.llm import Generation, SamplingParams
from trainer.models import load_policy, load_tokenizer
from trainer.registry import Registry
from trainer.rewards import REWARDS, contains
from trainer.rollout import rollout_metrics, score_rewards
from trainer.tools import TOOLS, BaseTool, ToolResult

SCRIPTS = [
    ['<tool_call>{"name": "open_box", "arguments": {"box": 7}}</tool_call>', "The code is 4242."],
    ["The code is 1234."],
    ['<tool_call>{"name": "open_box", "arguments": {box: 7}}</tool_call>', "I do not know the code."],
]
TOOL_REWARD = 0.25


class OpenBox(BaseTool):
    name = "open_box"
    description = "Open a numbered box and read the code inside."
    parameters = {"type": "object", "properties": {"box": {"type": "integer"}}, "required": ["box"]}

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        return ToolResult(
            text="The box holds the code 4242." if args["box"] == 7 else "Empty.", reward=TOOL_REWARD
        )


class ScriptedLLM:
    """Plays script i for the i-th trajectory that asks with the opening prompt; later steps are
    recognised by the script's first response in the history."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.openings = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        prompt = self.tokenizer.decode(prompt_ids)
        turn = prompt.count("<|im_start|>assistant") - 1
        if turn == 0:
            script, self.openings = SCRIPTS[self.openings], self.openings + 1
        else:
            script = next(s for s in SCRIPTS if s[0] in prompt)
        ids = [*self.tokenizer.encode(script[turn], add_special_tokens=False), self.tokenizer.eos_token_id]
        return Generation(token_ids=ids, log_probs=[-1.0] * len(ids), finish_reason="stop")


@pytest.fixture
def toy_task(temp_register: Callable[[Registry[Any], str, Any], Any]) -> str:
    temp_register(TOOLS, "open_box", OpenBox)
    temp_register(REWARDS, "secret_box", contains)
    return "secret_box"


def run_rollout(preset: str, tiny_model_dir: Path, **overrides: Any) -> tuple[list[Any], RunConfig, Any]:
    config = RunConfig.from_preset(
        preset,
        **{
            "model.path": str(tiny_model_dir),
            "rollout.n": 3,
            "rollout.max_steps": 3,
            "rollout.tools": ["open_box"],
            "trainer.batch_size": 1,
            "optim.mini_batch_size": 3,
            "algorithm.kl_coef": 0.0,
            **overrides,
        },
    )
    tokenizer = load_tokenizer(tiny_model_dir)
    row = {
        "data_source": "secret_box",
        "prompt": [{"role": "user", "content": "What is the code in box 7?"}],
        "reward_model": {"style": "rule", "ground_truth": "4242"},
        "extra_info": {"index": 0},
    }
    llm = ScriptedLLM(tokenizer)
    trajectories = rollout(
        [row], n=3, sampling=SamplingParams(), engine=llm, tokenizer=tokenizer, config=config, tag="t"
    )
    score_rewards(trajectories, [row], 3)
    return trajectories, config, tokenizer


def test_steps_carry_per_step_rewards_and_grpo_advantages(toy_task: str, tiny_model_dir: Path) -> None:
    trajectories, config, _ = run_rollout("grpo", tiny_model_dir)

    assert [[s.reward for s in t.steps] for t in trajectories] == [[TOOL_REWARD, 1.0], [0.0], [0.0, 0.0]]
    assert [t.steps[0].tool_calls[0].error for t in (trajectories[0], trajectories[2])] == [None, "malformed"]
    assert "4242" in trajectories[0].steps[1].prompt_text  # the tool result reached the next prompt

    policy = load_policy(tiny_model_dir)
    before = [p.detach().clone() for p in policy.parameters()]
    models = Models(policy, torch.optim.AdamW(policy.parameters(), lr=1e-3), 2, torch.device("cpu"))
    rows = flatten(trajectories)
    prepared = estimate_advantages(rows, models, config)
    metrics = update_policy(rows, prepared, models, config, generator=torch.Generator().manual_seed(0))

    returns = [1.25, 0.0, 0.0]
    mean, std = statistics.fmean(returns), statistics.stdev(returns)
    expected = [(r - mean) / (std + 1e-6) for r in returns]  # [1.1547, -0.5774, -0.5774]
    for trajectory, advantage in zip(trajectories, expected, strict=True):
        assert [s.advantage for s in trajectory.steps] == pytest.approx(
            [advantage] * len(trajectory.steps), abs=1e-5
        )
    assert metrics["actor/updates"] == 1.0
    assert all(not torch.equal(b, p) for b, p in zip(before, policy.parameters(), strict=True))


def test_step_level_reinforce_discounts_later_rewards(toy_task: str, tiny_model_dir: Path) -> None:
    trajectories, config, _ = run_rollout("reinforce", tiny_model_dir, **{"algorithm.gamma": 0.5})
    policy = load_policy(tiny_model_dir)
    models = Models(policy, torch.optim.AdamW(policy.parameters(), lr=1e-3), 2, torch.device("cpu"))
    rows = flatten(trajectories)
    estimate_advantages(rows, models, config)

    # G_t = r_t + gamma * G_{t+1} per step row: [0.25 + 0.5 * 1.0, 1.0], [0.0], [0.0, 0.0]; whitened over the 5 rows.
    step_returns = [0.75, 1.0, 0.0, 0.0, 0.0]
    mean, std = statistics.fmean(step_returns), statistics.stdev(step_returns)
    expected = [(g - mean) / (std + 1e-6) for g in step_returns]
    assert [s.advantage for s in rows.steps] == pytest.approx(expected, abs=1e-5)


def test_malformed_tool_calls_are_counted_in_the_tool_metrics(toy_task: str, tiny_model_dir: Path) -> None:
    trajectories, _, _ = run_rollout("grpo", tiny_model_dir)
    metrics = rollout_metrics(trajectories)
    # Two calls in three trajectories; one of them malformed.
    assert metrics["tools/calls_per_traj"] == pytest.approx(2 / 3)
    assert metrics["tools/error_rate"] == pytest.approx(0.5)
    assert metrics["tools/malformed_rate"] == pytest.approx(0.5)
    assert metrics["num_turns/mean"] == pytest.approx(5 / 3)
    assert metrics["reward/mean"] == pytest.approx(1.25 / 3)
