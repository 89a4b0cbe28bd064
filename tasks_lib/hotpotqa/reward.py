"""HotpotQA reward: normalised exact match of the ``<answer>`` text against the answer and its aliases;
token F1 is returned too, for logging (docs/tasks.md#hotpotqa)."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from trainer.rewards import answers as shared_answers

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (the SQuAD/HotpotQA rule)."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(text: str) -> str | None:
    """The text of the last ``<answer>...</answer>`` block, or None when there is none."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def f1_score(prediction: str, truth: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def answers(ground_truth: Any) -> list[str]:
    """The accepted answers: a string, a list (the answer first, then its aliases), or a struct with
    them under ``target`` (Search-R1's and Agent-R1's files)."""
    return [str(answer) for answer in shared_answers(ground_truth)]


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    predicted = extract_answer(solution_str)
    accepted = answers(ground_truth)
    if predicted is None:
        return {"score": 0.0, "acc": 0.0, "f1": 0.0}
    exact = any(normalize_answer(predicted) == normalize_answer(answer) for answer in accepted)
    f1 = max(f1_score(predicted, answer) for answer in accepted)
    return {"score": float(exact), "acc": float(exact), "f1": f1}
