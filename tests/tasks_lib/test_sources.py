"""Other projects' names and our lenient rewards: MATH equivalence, search-R1 exact match, verl's GSM8K tool."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tasks_lib.registry import load_recipes
from trainer.envs import ToolEnv
from trainer.mdp import Action
from trainer.rewards import DATA_SOURCES, score_step


@pytest.fixture(autouse=True, scope="module")
def _recipes() -> Iterator[None]:
    """The recipes loaded, and our lenient rule: this file is about our rewards for these names (verl's
    rule is tests/tasks_lib/test_verl_rules.py's)."""
    load_recipes()
    with DATA_SOURCES.mapped({}, "lenient"):
        yield


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5", 1.0),
        ("We get \\boxed{2\\sqrt{2}}.", "\\sqrt{8}", 1.0),
        ("first \\boxed{3}, no wait: \\boxed{4}", "4", 1.0),
        ("The answer is \\boxed{5}", "\\frac{9}{2}", 0.0),
    ],
)
def test_math_answers_are_checked_for_equivalence(response: str, truth: str, expected: float) -> None:
    score, details = score_step("HuggingFaceH4/MATH-500", response, truth, {})
    assert score == expected and details["acc"] == expected


def test_search_r1_matches_the_last_answer_span_against_any_target_after_normalisation() -> None:
    truth = {"target": ["The Beatles", "Beatles"]}
    assert score_step("searchR1_nq", "<think>hm</think><answer> the beatles.</answer>", truth, {})[0] == 1.0
    assert (
        score_step("searchR1_nq", "<answer>Beatles</answer> then <answer>Queen</answer>", truth, {})[0] == 0.0
    )
    assert score_step("searchR1_nq", "The Beatles", truth, {})[0] == 0.0


def test_agent_r1_hotpotqa_names_use_the_hotpotqa_reward() -> None:
    assert score_step("2wikimultihopqa", "<answer>Paris</answer>", "paris", {})[0] == 1.0


def run_call(env: ToolEnv, answer: str) -> Any:
    arguments = json.dumps({"answer": answer})
    call = f'<tool_call>{{"name": "calc_gsm8k_reward", "arguments": {arguments}}}</tool_call>'
    _, reward, _, info = asyncio.run(env.step(Action(text=call)))
    return reward, info["tool_calls"][0].result


def test_calc_gsm8k_reward_answers_like_verls_tool_and_is_offered_by_tools_kwargs() -> None:
    env = ToolEnv(tools=[])
    row = {"prompt": [{"role": "user", "content": "Natalia sold 48 clips ... How many?"}],
           "extra_info": {"index": 0, "need_tools_kwargs": True,
                          "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}}}  # fmt: skip
    observation = env.reset(**row)
    [schema] = observation.tools
    assert schema["function"]["name"] == "calc_gsm8k_reward"
    assert schema["function"]["parameters"]["properties"]["answer"]["type"] == "string"
    assert run_call(env, "70") == (-0.05, "Current parsed answer='70' reward=0.0")
    assert run_call(env, "72") == (0.0, "Current parsed answer='72' reward=1.0")
    assert run_call(env, "#### 72") == (-0.05, "Current parsed answer='#### 72' reward=1.0")
