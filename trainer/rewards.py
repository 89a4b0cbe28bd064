"""Reward functions, keyed by the row's ``data_source`` (as verl's ``default_compute_score`` is).

A reward function is ``fn(solution_str, ground_truth, extra_info) -> float | dict``; a dict must
hold ``"score"`` and may add other numbers (accuracy, F1, ...) that are logged beside it.
Recipes register theirs from their plugin module (see :mod:`trainer.plugins`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from trainer.registry import Registry, RegistryError

RewardFn = Callable[[str, Any, dict[str, Any]], "float | dict[str, Any]"]

REWARDS: Registry[RewardFn] = Registry("reward function for data_source")


def score_step(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None
) -> tuple[float, dict[str, Any]]:
    """Score one final response: (score, the other fields the reward function returned)."""
    try:
        reward_fn = REWARDS.get(data_source)
    except RegistryError as exc:
        raise RegistryError(
            f"{exc} (recipes register theirs when trainer.plugins.load_plugins() runs)"
        ) from None
    result = reward_fn(solution_str, ground_truth, dict(extra_info or {}))
    details: dict[str, Any] = {}
    if isinstance(result, Mapping):
        if "score" not in result:
            raise ValueError(
                f"reward function for {data_source!r} returned a dict without 'score': {sorted(result)}"
            )
        details = {key: value for key, value in result.items() if key != "score"}
        result = result["score"]
    if isinstance(result, bool) or not isinstance(result, int | float) or not math.isfinite(result):
        raise ValueError(f"reward function for {data_source!r} returned {result!r}; expected a finite number")
    return float(result), details


def _normalise(text: Any) -> str:
    return " ".join(str(text).split()).casefold()


def _answers(ground_truth: Any) -> list[str]:
    if isinstance(ground_truth, str) or not hasattr(ground_truth, "__iter__"):
        return [_normalise(ground_truth)]
    return [_normalise(answer) for answer in ground_truth]


@REWARDS.register("exact")
def exact_match(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """1.0 when the whole response equals the ground truth (or one of a list of them), ignoring case
    and runs of whitespace; else 0.0."""
    return float(_normalise(solution_str) in _answers(ground_truth))


@REWARDS.register("contains")
def contains(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """1.0 when the response contains the ground truth (or one of a list of them), ignoring case and
    runs of whitespace; else 0.0."""
    response = _normalise(solution_str)
    return float(any(answer in response for answer in _answers(ground_truth)))
