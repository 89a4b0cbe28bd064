"""search-R1 exact match (verl 0.9.1's ``search_r1_like_qa_em``, what it routes ``searchR1_*`` to): the
SQuAD-normalised text of the last ``<answer>...</answer>`` span against any of the ground truth's
``target`` answers; no span scores 0."""

from __future__ import annotations

from typing import Any

from tasks_lib.hotpotqa.reward import extract_answer, normalize_answer
from trainer.rewards import answers


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    predicted = extract_answer(solution_str)
    correct = predicted is not None and any(
        normalize_answer(predicted) == normalize_answer(str(target)) for target in answers(ground_truth)
    )
    return {"score": float(correct), "acc": float(correct)}
