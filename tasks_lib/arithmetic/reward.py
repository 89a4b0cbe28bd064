"""Arithmetic demo reward, shaped so that a 135M model has something to learn from its first steps.

An episode earns up to 1.0: ``CORRECT`` when the final number is right, ``FORMAT`` when the final reply
gives it as ``Answer: N``, and ``TOOL`` (paid by the calculator, set per row) for the first clean
calculator call. Format and tool use are easy to pick up, so GRPO's groups differ in reward from the
start and the curve rises within minutes; ``acc`` is correctness alone, for validation.
The answer is the number after the last ``Answer:`` (or ``####``); without either, the last number.
"""

from __future__ import annotations

import re
from typing import Any

from tasks_lib.gsm8k.reward import extract_answer, normalize_number

CORRECT = 0.8
FORMAT = 0.1
TOOL = 0.1

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*(-?\d[\d,]*(?:\.\d+)?)", re.IGNORECASE)


def final_answer(text: str) -> str | None:
    marked = _ANSWER.findall(text)
    if marked:
        return normalize_number(marked[-1])
    return extract_answer(text)


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    predicted = final_answer(solution_str)
    correct = predicted is not None and predicted == normalize_number(str(ground_truth))
    formatted = bool(_ANSWER.search(solution_str))
    score = CORRECT * correct + FORMAT * formatted
    return {"score": score, "acc": float(correct), "formatted": float(formatted), "pred": predicted or ""}
