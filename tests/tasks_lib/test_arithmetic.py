"""The arithmetic demo: deterministic generation, its reward, and episodes through ToolEnv."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tasks_lib import validate
from tasks_lib.arithmetic.data import generate
from tasks_lib.arithmetic.prompts import SYSTEM_PROMPT
from tasks_lib.arithmetic.reward import compute_score
from tasks_lib.gsm8k.tools import evaluate, format_number
from tests.tasks_lib.helpers import (
    last_text,
    malformed_policy,
    play,
    random_text_policy,
    read_rows,
    scripted,
    tool_call,
)
from trainer.mdp import Observation

Prepared = Callable[..., dict[str, Path]]


def test_generation_is_deterministic_distinct_and_small() -> None:
    first, again, other = generate(200, seed=3), generate(200, seed=3), generate(200, seed=4)
    assert first == again and first != other
    assert len({item.expression for item in first}) == 200
    for item in first:
        assert item.answer == format_number(evaluate(item.expression))
        assert all(int(n) <= 20 for n in re.findall(r"\d+", item.expression))
        assert item.question == f"What is {item.expression}?"


def test_the_system_prompt_shows_the_exact_tool_call_format() -> None:
    assert (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>'
        in SYSTEM_PROMPT
    )
    assert len(SYSTEM_PROMPT) < 200  # a small model's context is short; keep the prompt so


def test_the_reward_pays_for_the_right_number_and_for_the_answer_format() -> None:
    assert compute_score("Answer: 19", "19", {}) | {"pred": ""} == {
        "score": 0.9,
        "acc": 1.0,
        "formatted": 1.0,
        "pred": "",
    }
    assert compute_score("the answer is 19.", "19", {})["score"] == 0.9
    assert compute_score("12 + 7 = 19", "19", {})["score"] == 0.8
    assert compute_score("Answer: 19, not 20", "20", {})["score"] == pytest.approx(0.1)
    assert compute_score("nineteen", "19", {}) == {"score": 0.0, "acc": 0.0, "formatted": 0.0, "pred": ""}


def test_prepare_generates_valid_train_and_val_splits(prepared: Prepared) -> None:
    splits = prepared("arithmetic", fixtures=False, size=50)
    assert [len(read_rows(splits[s])) for s in ("train", "val")] == [45, 5]
    assert all(validate(path) == [] for path in splits.values())


def calculator_then_answer(expression: str) -> Callable[[Observation], str]:
    """Calls the calculator, then answers with the number the tool sent back."""

    def policy(observation: Observation) -> str:
        text = last_text(observation)
        if text.startswith("<tool_response>"):
            return f"Answer: {text.split()[1]}"
        return tool_call("calculator", expression=expression)

    return policy


def test_using_the_calculator_then_answering_earns_full_reward(prepared: Prepared) -> None:
    for path in prepared("arithmetic", fixtures=False, size=50).values():
        for row in read_rows(path):
            episode = play(row, calculator_then_answer(row["extra_info"]["expression"]), max_steps=3)
            assert episode.rewards == [pytest.approx(0.1), pytest.approx(0.9)]
            assert sum(episode.rewards) == pytest.approx(1.0)


def test_only_the_first_clean_calculator_call_is_paid(prepared: Prepared) -> None:
    row = read_rows(prepared("arithmetic", fixtures=False, size=50)["train"])[0]
    replies = [
        tool_call("calculator", expression="1 +"),
        tool_call("calculator", expression="2 + 2"),
        tool_call("calculator", expression="3 + 3"),
    ]
    episode = play(row, scripted([*replies, "Answer: 0"]), max_steps=4)
    assert episode.rewards[:3] == [0.0, pytest.approx(0.1), 0.0]


def test_random_and_malformed_policies_earn_little_and_never_crash(prepared: Prepared) -> None:
    rows = read_rows(prepared("arithmetic", fixtures=False, size=50)["train"])
    totals = [
        play(row, random_text_policy(seed, "calculator", "expression"), max_steps=5).total
        for seed, row in enumerate(rows)
    ]
    assert sum(totals) / len(totals) < 0.2
    for row in rows[:10]:
        assert play(row, malformed_policy("no idea"), max_steps=12).total == 0.0
