"""GSM8K reward: binary, the final answer against the ground truth (docs/tasks.md#gsm8k).

The answer is the number after the last ``#### `` marker (GSM8K's own convention); without one, the
last number in the response. The trainer calls this only for the final answer step (a response with
no tool call), so tool-calling steps earn nothing.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_MARKED = re.compile(r"####\s*\$?\s*(-?[\d,]*\.?\d+)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def normalize_number(text: str) -> str | None:
    """A canonical spelling of a number ("1,000.50" -> "1000.5", "-0" -> "0"), or None if it is not one."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_answer(text: str) -> str | None:
    """The final answer of a response: the number after the last ``####``, else its last number."""
    marked = _MARKED.findall(text)
    if marked:
        return normalize_number(marked[-1])
    numbers = _NUMBER.findall(text)
    return normalize_number(numbers[-1]) if numbers else None


def ground_truth_answer(answer_text: str) -> str:
    """The number in a GSM8K solution's ``#### N`` line."""
    marked = _MARKED.findall(answer_text)
    value = normalize_number(marked[-1]) if marked else None
    if value is None:
        raise ValueError(f"no '#### <number>' final answer in {answer_text[-80:]!r}")
    return value


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    """1.0 when the extracted answer equals the ground truth number, else 0.0."""
    predicted = extract_answer(solution_str)
    expected = normalize_number(str(ground_truth))
    correct = predicted is not None and expected is not None and predicted == expected
    return {"score": float(correct), "acc": float(correct), "pred": predicted or ""}
