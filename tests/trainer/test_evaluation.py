"""pass@k (Chen et al. 2021), the eval/... metrics of a batch of scored samples, and the evaluation
section's rules. The torch backend's evaluation mode runs end to end, from a saved checkpoint through
the worker and the trainer, in tests/webapp/experiments/test_evaluations.py."""

from __future__ import annotations

import itertools
import math

import pytest

from trainer.config import RunConfig
from trainer.contract import EVAL_ACC, EVAL_PASS_AT_1, EVAL_PASS_AT_K, EVAL_PROMPTS, EVAL_REWARD_MEAN
from trainer.evaluation import evaluation_metrics, pass_at_k


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of the C(n, k) draws of k samples that hold a passing one (samples 0..c-1 pass)."""
    draws = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in draw) for draw in draws) / len(draws)


@pytest.mark.parametrize(("n", "c", "k"), [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 1, 6), (7, 3, 2)])
def test_pass_at_k_is_the_share_of_draws_of_k_that_hold_a_passing_sample(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))


def test_pass_at_1_is_the_passing_fraction_and_pass_at_n_is_any_pass() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0
    # n - c < k: every draw of k holds a passing sample
    assert pass_at_k(5, 4, 2) == 1.0


def test_pass_at_k_stays_exact_for_large_n() -> None:
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)
    assert math.isfinite(pass_at_k(1000, 7, 50))


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_evaluation_metrics_average_per_prompt_and_per_sample() -> None:
    # Prompt a: 1 of 2 passes; prompt b: 2 of 2 (acc 0.5 passes: the threshold is inclusive).
    accuracies = [("a", 1.0), ("a", 0.0), ("b", 0.5), ("b", 1.0)]
    metrics = evaluation_metrics(accuracies, [1.0, 0.0, 0.5, 2.5], k=2)
    assert metrics[EVAL_ACC] == pytest.approx(0.625)
    assert metrics[EVAL_PASS_AT_1] == pytest.approx((0.5 + 1.0) / 2)
    assert metrics[EVAL_PASS_AT_K] == pytest.approx(1.0)
    assert metrics[EVAL_REWARD_MEAN] == pytest.approx(1.0)
    assert metrics[EVAL_PROMPTS] == 2.0


def test_an_evaluation_needs_a_val_split_and_a_checkpoint_needs_an_evaluation() -> None:
    with pytest.raises(ValueError, match=r"data\.val_path"):
        RunConfig(evaluation={"enabled": True})
    with pytest.raises(ValueError, match=r"evaluation\.enabled"):
        RunConfig(evaluation={"checkpoint": "/x"})
