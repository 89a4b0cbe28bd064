"""Lookup reward: 1 when the final ``Answer:`` is the stored value, else 0 (``acc`` the same).

The values are random six-digit numbers that exist only behind the lookup tool, so a policy that
does not call it scores about 0 (docs/recipes.md#lookup). No format or tool shaping: what pays is
the value.
"""

from __future__ import annotations

from typing import Any

from tasks_lib.arithmetic.reward import final_answer


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    predicted = final_answer(solution_str)
    correct = float(predicted is not None and predicted == str(ground_truth).strip())
    return {"score": correct, "acc": correct, "pred": predicted or ""}
