"""verl 0.9.1's search-R1 exact match (``verl/utils/reward_score/search_r1_like_qa_em.py``),
re-implemented for machines without verl: the last ``<answer>…</answer>`` span, SQuAD-normalised,
against each of ``ground_truth["target"]``; a right answer in a response with more than ten opening or
closing answer tags earns a quarter."""

from __future__ import annotations

import re
from typing import Any

from trainer.rewards import normalize_answer

_SPAN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
MAX_TAGS = 10  # more answer tags than this: the right answer counts a quarter


def extract_solution(solution_str: str) -> str | None:
    spans = _SPAN.findall(solution_str)
    return spans[-1].strip() if spans else None


def em_check(prediction: str, golden_answers: Any) -> bool:
    answers = [golden_answers] if isinstance(golden_answers, str) else golden_answers
    predicted = normalize_answer(prediction)
    return any(normalize_answer(answer) == predicted for answer in answers)


def compute_score(solution_str: str, ground_truth: Any) -> float:
    answer = extract_solution(solution_str)
    if answer is None or not em_check(answer, ground_truth["target"]):
        return 0.0
    too_many = solution_str.count("<answer>") > MAX_TAGS or solution_str.count("</answer>") > MAX_TAGS
    return 0.25 if too_many else 1.0
