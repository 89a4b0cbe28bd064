"""Prepared rows load in the trainer and run through its AgentEnvLoop to the right reward.

The trainer's own pieces run here: its parquet loader, the AgentEnvLoop flow with SmolLM2's real
tokenizer and chat template, and the rollout's reward scoring. The LLM is the one seam stood in for:
an oracle policy reads the decoded prompt and answers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import load_recipes
from tasks_lib.alfworld.data import resolve_game
from tasks_lib.alfworld.engine import expert_plan
from tests.tasks_lib.helpers import PolicyLLM, tool_call
from tests.tasks_lib.test_gsm8k import oracle_replies as gsm8k_replies
from tests.tasks_lib.test_hotpotqa import oracle as hotpotqa_replies
from tests.tasks_lib.test_webshop import oracle as webshop_oracle
from trainer.backends.torch.data import load_rows
from trainer.flows import FLOWS, flow_for_row
from trainer.llm import SamplingParams
from trainer.mdp import Observation, Trajectory
from trainer.rollout import score_trajectory

Prepared = Callable[..., dict[str, Path]]
TextPolicy = Callable[[str], str]


def last_user_message(prompt: str) -> str:
    return prompt.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


def in_order(replies: list[str]) -> TextPolicy:
    queue = iter(replies)
    return lambda prompt: next(queue)


def arithmetic_policy(prompt: str) -> str:
    message = last_user_message(prompt)
    if message.startswith("<tool_response>"):
        return f"Answer: {message.split()[1]}"
    return tool_call("calculator", expression=re.search(r"What is (.+)\?", message).group(1))  # type: ignore[union-attr]


def webshop_policy(row: dict[str, Any]) -> TextPolicy:
    policy = webshop_oracle(row)
    return lambda prompt: policy(
        Observation(messages=[{"role": "user", "content": last_user_message(prompt)}])
    )


ORACLES: dict[str, Callable[[dict[str, Any]], TextPolicy]] = {
    "arithmetic": lambda row: arithmetic_policy,
    "gsm8k": lambda row: in_order(gsm8k_replies(row)),
    "hotpotqa": lambda row: in_order(hotpotqa_replies(row)),
    "alfworld": lambda row: in_order(
        [tool_call("env_step", command=c) for c in expert_plan(resolve_game(row["extra_info"]["gamefile"]))]
    ),
    "webshop": webshop_policy,
}


def run_episode(row: dict[str, Any], tokenizer: Any, policy: TextPolicy, max_steps: int) -> Trajectory:
    llm = PolicyLLM(tokenizer, policy)
    flow = FLOWS.get(flow_for_row(row))(llm, tokenizer, max_steps=max_steps, max_prompt_length=16384)
    output = asyncio.run(flow.run(SamplingParams(max_new_tokens=128), **row))
    trajectory = output.to_trajectory(row, traj_id="t0", group_id="g0")
    score_trajectory(trajectory, row)
    return trajectory


@pytest.mark.slow
@pytest.mark.parametrize("task", ["arithmetic", "gsm8k", "hotpotqa", "alfworld", "webshop"])
def test_a_prepared_row_runs_through_agent_env_loop_to_full_reward(
    task: str, prepared: Prepared, smol_tokenizer: Any
) -> None:
    recipe = load_recipes().get(task)
    splits = prepared(task, fixtures=True)
    rows = load_rows(splits["train"], limit=2)
    for row in rows:
        trajectory = run_episode(row, smol_tokenizer, ORACLES[task](row), recipe.max_steps)
        assert trajectory.total_reward == pytest.approx(1.0), [s.response_text for s in trajectory.steps]
        assert trajectory.steps[-1].info["stop_reason"] == "done"
        assert trajectory.sample_index == row["extra_info"]["index"]
        first_prompt = trajectory.steps[0].prompt_text
        # SmolLM2's template ignores tools=, so the flow puts the recipe's tools in the system message.
        assert all(f'"name": "{tool}"' in first_prompt for tool in recipe.tools)
        assert not any(call.error for step in trajectory.steps for call in step.tool_calls)
