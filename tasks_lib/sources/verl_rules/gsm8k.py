"""verl 0.9.1's GSM8K rule (``verl/utils/reward_score/gsm8k.py``, strict method), re-implemented for
machines without verl: the number after the last ``#### `` in the response's last 300 characters,
compared as a string with the ground truth. Format is part of the score: "The answer is 72",
"####72" and "#### $72" score 0, and so does "#### 72.0" against "72"."""

from __future__ import annotations

import re
from typing import Any

TAIL_CHARS = 300  # verl reads only the end of a long response
_MARKED = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_solution(solution_str: str) -> str | None:
    """The last ``#### N`` number of the response's tail, commas removed; None without one."""
    found = _MARKED.findall(solution_str[-TAIL_CHARS:])
    return found[-1].replace(",", "").replace("$", "") if found else None


def compute_score(solution_str: str, ground_truth: Any) -> float:
    """1.0 when the marked number equals the ground truth as written (no numeric comparison), else 0.0."""
    answer = extract_solution(solution_str)
    return 1.0 if answer is not None and answer == ground_truth else 0.0
