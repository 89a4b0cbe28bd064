"""verl 0.9.1's MATH rule (``verl/utils/reward_score/math_reward.py``, Hendrycks' MATH equivalence),
re-implemented for machines without verl: the last ``\\boxed{…}`` (or ``\\boxed …``, or ``\\fbox{…}``)
of the response, and the ground truth, both normalised by string rules (fractions, square roots,
units, ``0.5`` → ``\\frac{1}{2}``) and compared as strings. No box scores 0."""

from __future__ import annotations

from typing import Any


class BoxError(ValueError):
    """A boxed answer that is not ``\\boxed{…}`` after all: verl's asserts, scored 0."""


def last_boxed_only_string(text: str) -> str | None:
    """The last ``\\boxed{…}`` with balanced braces (``\\boxed x`` up to a ``$``, else ``\\fbox{…}``)."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    return balanced_from(text, start)


def balanced_from(text: str, start: int) -> str | None:
    """``text`` from ``start`` up to the brace that closes the first one opened there; None when
    ``start`` is -1 (nothing found) or the braces never close. verl's MATH and DAPO rules share it."""
    if start < 0:
        return None
    depth = 0
    for position in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[position], 0)
        if text[position] == "}" and depth == 0:
            return text[start : position + 1]
    return None


def remove_boxed(text: str) -> str:
    if "\\boxed " in text:
        if not text.startswith("\\boxed "):
            raise BoxError(text)
        return text[len("\\boxed ") :]
    if not text.startswith("\\boxed{") or not text.endswith("}"):
        raise BoxError(text)
    return text[len("\\boxed{") : -1]


def _fix_fracs(text: str) -> str:
    """``\\frac12`` → ``\\frac{1}{2}``, ``\\frac1b`` → ``\\frac{1}{b}``; unchanged when too short."""
    first, *rest = text.split("\\frac")
    fixed = first
    for part in rest:
        fixed += "\\frac"
        if part[0] == "{":  # an empty part raises IndexError, as verl's does
            fixed += part
            continue
        if len(part) < 2:
            return text
        numerator, denominator, after = part[0], part[1], part[2:]
        if denominator != "{":
            fixed += "{" + numerator + "}{" + denominator + "}" + after
        else:
            fixed += "{" + numerator + "}" + denominator + after
    return fixed


def _fix_a_slash_b(text: str) -> str:
    """``3/4`` → ``\\frac{3}{4}`` for two integers written plainly."""
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        numerator, denominator = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    if text != f"{numerator}/{denominator}":
        return text
    return "\\frac{" + str(numerator) + "}{" + str(denominator) + "}"


def _remove_right_units(text: str) -> str:
    if "\\text{ " not in text:
        return text
    splits = text.split("\\text{ ")
    if len(splits) != 2:
        raise ValueError(f"more than one unit in {text!r}")
    return splits[0]


def _fix_sqrt(text: str) -> str:
    """``\\sqrt3`` → ``\\sqrt{3}``."""
    if "\\sqrt" not in text:
        return text
    first, *rest = text.split("\\sqrt")
    fixed = first
    for part in rest:
        # an empty part raises IndexError, as verl's does
        fixed += "\\sqrt{" + part[0] + "}" + part[1:] if part[0] != "{" else "\\sqrt" + part
    return fixed


# Plain removals and replacements, in verl's order (before units and percentages are handled).
_REPLACEMENTS = (
    ("\n", ""),
    ("\\!", ""),
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
)


def strip_string(text: str) -> str:
    for before, after in _REPLACEMENTS:
        text = text.replace(before, after)
    text = _remove_right_units(text)
    text = text.replace("\\\\%", "").replace("\\%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 3" → "3"
        text = sides[1]
    text = _fix_sqrt(text).replace(" ", "")
    text = _fix_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _fix_a_slash_b(text)


def is_equiv(answer: Any, truth: Any) -> bool:
    if answer is None or truth is None:
        return answer is None and truth is None
    try:
        return bool(strip_string(answer) == strip_string(truth))
    except Exception:  # verl compares the raw strings when its normalisation fails on either
        return bool(answer == truth)


def compute_score(solution_str: str, ground_truth: Any) -> float:
    """1.0 when the last boxed answer is equivalent to the ground truth, else 0.0."""
    try:
        boxed = last_boxed_only_string(solution_str)
        if boxed is not None and is_equiv(remove_boxed(boxed), ground_truth):
            return 1.0
    except Exception:  # verl prints the error and scores 0
        return 0.0
    return 0.0
