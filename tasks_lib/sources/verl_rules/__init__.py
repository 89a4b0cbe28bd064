"""The *verl* reward rule: each data source verl 0.9.1's ``default_compute_score`` scores, scored to
the same value (docs/rewards.md#verl-and-lenient-rules).

Where verl is installed its own functions (``verl.utils.reward_score.<module>``) score; elsewhere our
re-implementations in this package do (the trainer runs without verl), checked against verl's in
tests/tasks_lib/test_verl_rules.py. Out of scope, so scored by our lenient rule only: PRIME's math
(``numina_*``: verl's sympy grader needs ``pylatexenc``, which verl's CPU core does not install, and is
not re-implemented); and under either rule, code (a sandbox) and geometry3k (images, ``mathruler``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from tasks_lib.sources.verl_rules import gsm8k, math_dapo, math_reward, search_r1
from trainer.rewards import RewardFn

Scorer = Callable[[str, Any], Any]


@functools.cache
def verl_module(name: str) -> ModuleType | None:
    """verl's own ``verl.utils.reward_score.<name>``, or None where verl (or what it needs) is missing."""
    try:
        return importlib.import_module(f"verl.utils.reward_score.{name}")
    except ImportError:
        return None


def as_reward(result: Any) -> float | dict[str, Any]:
    """A verl score as ``default_compute_score`` returns it (a dict as it is, a number as a float, a
    tuple's first item), with a dict's boolean ``acc`` as a number so that it is logged."""
    if isinstance(result, Mapping):
        return {key: float(value) if isinstance(value, bool) else value for key, value in result.items()}
    if isinstance(result, int | float | bool):
        return float(result)
    return float(result[0])


def verl_rule(module: str, ours: Scorer) -> RewardFn:
    """The reward that scores like verl's ``<module>.compute_score``: verl's own where it imports, else
    ``ours``."""

    def reward(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float | dict[str, Any]:
        found = verl_module(module)
        scorer = found.compute_score if found is not None else ours
        return as_reward(scorer(solution_str, ground_truth))

    reward.__doc__ = f"verl 0.9.1's {module}.compute_score, as default_compute_score returns it."
    return reward


# reward name → (verl's module, our re-implementation)
RULES: dict[str, tuple[str, Scorer]] = {
    "verl_gsm8k": ("gsm8k", gsm8k.compute_score),
    "verl_math": ("math_reward", math_reward.compute_score),
    "verl_math_dapo": ("math_dapo", math_dapo.compute_score),
    "verl_search_r1": ("search_r1_like_qa_em", search_r1.compute_score),
}
