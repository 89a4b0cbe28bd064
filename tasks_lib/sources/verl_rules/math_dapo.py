"""verl 0.9.1's DAPO math rule (``verl/utils/reward_score/math_dapo.py``), what verl routes
``math_dapo``, ``math``, ``math_dapo_reasoning`` and ``aime*`` to, re-implemented for machines without
verl. In the response's last 300 characters: the last ``Answer: x`` line (Minerva's normalisation,
compared as a string with the normalised ground truth), else the last ``\\boxed{…}`` of its last 100
characters compared as written. Right scores 1.0, wrong -1.0."""

from __future__ import annotations

import re
from typing import Any

from tasks_lib.sources.verl_rules.math_reward import balanced_from

INVALID = "[INVALID]"
TAIL_CHARS = 300  # verl: "the longest answer in MATH-500 has 159 characters"
BOX_TAIL_CHARS = 100
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")

SUBSTITUTIONS = [
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    (r"\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
]
REMOVED_EXPRESSIONS = [
    *("square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots"),
    *("sue", "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds"),
    *("meters", "meals", "edges", "students", "childrentickets", "multiples", "\\text{s}"),
    *("\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}"),
    *(r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;", r",\!", "{,}", '"', "\\dots"),
]
# (pattern, replacement) in verl's order: LaTeX math, text wrappers, then shorthand TeX.
_REWRITES = [
    (r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$"),
    (r"(\\text\{)(.*?)(\})", "\\2"),
    (r"(\\textbf\{)(.*?)(\})", "\\2"),
    (r"(\\overline\{)(.*?)(\})", "\\2"),
    (r"(\\boxed\{)(.*)(\})", "\\2"),
    (r"(frac)([^{])(.)", "frac{\\2}{\\3}"),
    (r"(sqrt)([^{])", "sqrt{\\2}"),
]


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{…}`` with balanced braces, else None."""
    return balanced_from(text, text.rfind("\\boxed{"))


def normalize_final_answer(final_answer: str) -> str:
    """Minerva's normalisation of a final answer: the part after the last ``=``, units and TeX
    wrappers removed, shorthand TeX spelled out, thousands separators dropped from whole numbers."""
    final_answer = final_answer.split("=")[-1]
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expression in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expression, "")
    for pattern, replacement in _REWRITES:
        final_answer = re.sub(pattern, replacement, final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


def is_correct_minerva(solution_str: str, ground_truth: str) -> tuple[bool, str]:
    found = _ANSWER_LINE.findall(solution_str)
    predicted = normalize_final_answer(found[-1] if found else INVALID)
    return predicted == normalize_final_answer(ground_truth), predicted


def is_correct_strict_box(solution_str: str, ground_truth: str) -> tuple[int, str | None]:
    boxed = last_boxed_only_string(solution_str[-BOX_TAIL_CHARS:])
    extracted = boxed[len("\\boxed{") : -1] if boxed is not None else None
    return (1 if extracted == ground_truth else -1), extracted


def verify(solution_str: str, ground_truth: str) -> tuple[bool, str]:
    """Minerva's ``Answer:`` first; without one, the last box."""
    correct, predicted = is_correct_minerva(solution_str, ground_truth)
    if predicted != INVALID:
        return correct, predicted
    box_correct, box_predicted = is_correct_strict_box(solution_str, ground_truth)
    if box_predicted is not None:
        return box_correct == 1, box_predicted
    return correct, predicted


def compute_score(solution_str: str, ground_truth: Any) -> dict[str, Any]:
    correct, predicted = verify(solution_str[-TAIL_CHARS:], ground_truth)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": predicted}
