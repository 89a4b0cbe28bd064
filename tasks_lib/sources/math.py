"""MATH reward: the response's final answer (its last ``\\boxed{}``, else its last expression) checked
for mathematical equivalence with the ground truth by math-verify (``1/2`` = ``\\frac{1}{2}`` = ``0.5``),
as verl's MATH reward checks a ``\\boxed{}`` answer, with a well-kept parser instead of string rules."""

from __future__ import annotations

from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

# math-verify's own time limits use signal.alarm, which works only in a process's main thread; rewards
# also run in verl's worker threads, so they are off (the parsers are bounded by the text's size).
_NO_TIMEOUT: dict[str, Any] = {"parsing_timeout": None}
_EXTRACTION = [LatexExtractionConfig(), ExprExtractionConfig()]


def _gold(ground_truth: Any) -> list[Any]:
    text = str(ground_truth).strip()
    # A bare LaTeX answer ("\\frac{1}{2}") is read as LaTeX; "$...$" and "\\boxed{...}" already are.
    wrapped = text if text.startswith(("$", "\\boxed", "\\(")) else f"${text}$"
    return list(parse(wrapped, extraction_config=_EXTRACTION, **_NO_TIMEOUT)) or list(
        parse(text, extraction_config=[ExprExtractionConfig()], **_NO_TIMEOUT)
    )


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (braces balanced), as verl's MATH reward reads it."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, opened = 0, start + len("\\boxed")
    for position in range(opened, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if depth == 0:
            return text[opened + 1 : position]
    return None


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    """1.0 when the final answer is equivalent to the ground truth, else 0.0."""
    gold = _gold(ground_truth)
    boxed = last_boxed(solution_str)
    text = f"${boxed}$" if boxed is not None else solution_str
    answer = list(parse(text, extraction_config=_EXTRACTION, **_NO_TIMEOUT))
    correct = bool(gold and answer and verify(gold, answer, timeout_seconds=None))
    predicted = str(answer[-1]) if answer else ""
    return {"score": float(correct), "acc": float(correct), "pred": predicted}
