from __future__ import annotations

from typing import Any

import pytest

from trainer.registry import RegistryError
from trainer.rewards import REWARDS, score_step


def test_exact_ignores_case_and_whitespace_but_nothing_else() -> None:
    assert score_step("exact", "  Paris\n", "paris", {}) == (1.0, {})
    assert score_step("exact", "It is Paris", "paris", {}) == (0.0, {})


def test_contains_accepts_any_of_several_answers() -> None:
    assert score_step("contains", "The capital is  PARIS.", ["Lyon", "paris"], {}) == (1.0, {})
    assert score_step("contains", "The capital is Rome.", ["Lyon", "paris"], {}) == (0.0, {})


def test_it_keeps_the_extra_numbers_of_a_dict_result(temp_register: Any) -> None:
    temp_register(REWARDS, "toy_qa", lambda solution, truth, info: {"score": 0.5, "f1": 0.8, "acc": 0.0})
    assert score_step("toy_qa", "x", "y", {"index": 1}) == (0.5, {"f1": 0.8, "acc": 0.0})


def test_it_passes_the_extra_info_to_the_reward_function(temp_register: Any) -> None:
    temp_register(REWARDS, "toy_len", lambda solution, truth, info: float(info["target"] == len(solution)))
    assert score_step("toy_len", "abc", None, {"target": 3}) == (1.0, {})


def test_it_names_the_registered_data_sources_for_an_unknown_one() -> None:
    with pytest.raises(
        RegistryError,
        match=r"no reward function is registered for 'gsm9k' \(registered: .*contains, exact.*\); map it",
    ):
        score_step("gsm9k", "42", "42", {})


def test_it_rejects_a_dict_without_a_score_or_a_value_that_is_not_a_number(temp_register: Any) -> None:
    temp_register(REWARDS, "toy_noscore", lambda solution, truth, info: {"acc": 1.0})
    temp_register(REWARDS, "toy_nan", lambda solution, truth, info: float("nan"))
    with pytest.raises(ValueError, match="without 'score'"):
        score_step("toy_noscore", "x", "y", {})
    with pytest.raises(ValueError, match="expected a finite number"):
        score_step("toy_nan", "x", "y", {})
