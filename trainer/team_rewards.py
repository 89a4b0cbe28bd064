"""A team's own rewards (docs/rewards.md#team-rewards) as reward functions: a rule kind with an
optional format bonus, or a remote endpoint called with one checked POST per score
(:func:`trainer.tools.http.post_checked`, docs/security.md#outbound).
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import httpx

from trainer.contract import to_jsonable
from trainer.rewards import RewardError, RewardFn, answers, last_number, normalize_answer, token_f1
from trainer.tools.allowlist import OutboundRefused
from trainer.tools.http import HttpToolError, post_checked

if TYPE_CHECKING:
    from trainer.contract import TeamRewardSpec
    from trainer.tools.allowlist import OutboundPolicy

RULES = ("exact", "numeric", "contains", "regex", "f1")


def rule_score(
    rule: str, response: str, ground_truth: Any, *, tolerance: float = 0.0, pattern: str = ""
) -> float:
    """One rule kind's score in [0, 1] (docs/rewards.md#rule-kinds).

    exact: normalised exact match against any answer; numeric: the response's last number within
    ``tolerance`` of the answer; contains: a normalised answer inside the normalised response; regex:
    the first group (or the whole match) of ``pattern``'s last match, normalised, against the answers;
    f1: the best token F1 against the answers.
    """
    truths = answers(ground_truth)
    if rule == "regex":
        matches = list(re.finditer(pattern, response))
        if not matches:
            return 0.0
        last = matches[-1]
        response = last.group(1) if last.groups() else last.group(0)
        rule = "exact_normalised"
    if rule in ("exact", "exact_normalised"):
        return float(normalize_answer(response) in {normalize_answer(truth) for truth in truths})
    if rule == "contains":
        text = normalize_answer(response)
        return float(any(normalize_answer(truth) and normalize_answer(truth) in text for truth in truths))
    if rule == "numeric":
        value = last_number(response)
        targets = [last_number(str(truth)) for truth in truths]
        return float(
            value is not None and any(t is not None and abs(value - t) <= tolerance for t in targets)
        )
    if rule == "f1":
        return max((token_f1(response, truth) for truth in truths), default=0.0)
    raise ValueError(f"unknown rule {rule!r}; choose one of {', '.join(RULES)}")


def build_reward(spec: TeamRewardSpec, policy: OutboundPolicy | None = None) -> RewardFn:
    """The reward function a team's spec describes (a rule kind, or a remote endpoint whose URL and
    resolved address are checked against ``policy`` at every call, docs/security.md#outbound)."""
    if spec.kind == "remote":
        return remote_reward(spec, policy)
    if spec.rule not in RULES:
        raise ValueError(
            f"reward {spec.name!r}: unknown rule {spec.rule!r}; choose one of {', '.join(RULES)}"
        )
    pattern = re.compile(spec.pattern) if spec.rule == "regex" else None
    format_pattern = re.compile(spec.format_pattern) if spec.format_pattern else None

    def score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
        correct = rule_score(
            spec.rule,
            solution_str,
            ground_truth,
            tolerance=spec.tolerance,
            pattern=pattern.pattern if pattern else "",
        )
        formatted = bool(format_pattern and format_pattern.search(solution_str))
        bonus = spec.format_bonus if formatted else 0.0
        return {"score": correct + bonus, "acc": correct, "format": float(formatted)}

    return score


# -- remote rewards -----------------------------------------------------------------------------------


def remote_reward(spec: TeamRewardSpec, policy: OutboundPolicy | None = None) -> RewardFn:
    """A reward function that POSTs ``{data_source, response, ground_truth, extra_info}`` to the
    spec's endpoint and reads ``{"score": x, ...}`` (or a bare number) back, with ``retries`` more
    tries after a timeout, a connection error or a 5xx. When every try fails it raises RewardError:
    the step scores 0 and the run counts a reward error (docs/rewards.md#remote-rewards). Each try is
    checked against ``policy`` like a tool call; None: the caller owns the machine (a config file)."""
    headers = {"Accept": "application/json"}
    if spec.secret:
        headers[spec.secret_header] = spec.secret

    def score(
        solution_str: str, ground_truth: Any, extra_info: dict[str, Any], *, data_source: str = ""
    ) -> float | dict[str, Any]:
        body = {
            "data_source": data_source or spec.data_source,
            "response": solution_str,
            "ground_truth": to_jsonable(ground_truth),
            "extra_info": to_jsonable(extra_info),
        }
        problem = ""
        for attempt in range(spec.retries + 1):
            try:
                status, answer = post_checked(spec.url, policy, spec.timeout_s, headers, body)
            except httpx.TimeoutException:
                problem = f"timed out after {spec.timeout_s:g} s"
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            except (OutboundRefused, OSError, HttpToolError) as exc:  # refused, unresolvable, too large
                raise RewardError(f"reward {spec.name!r}: {exc}") from None
            else:
                if status < 500:
                    try:
                        return _score_from(status, answer, spec.url)
                    except HttpToolError as exc:
                        raise RewardError(f"reward {spec.name!r}: {exc}") from None
                problem = f"HTTP {status}"
            if attempt < spec.retries:
                time.sleep(min(0.2 * 2**attempt, 2.0))
        tries = spec.retries + 1
        raise RewardError(f"reward {spec.name!r} ({spec.url}): {problem} ({tries} tries)")

    score.takes_data_source = True  # type: ignore[attr-defined]
    return score


def _score_from(status: int, body: bytes, url: str) -> float | dict[str, Any]:
    text = body[:200].decode("utf-8", errors="replace")
    if 300 <= status < 400:
        raise HttpToolError(f"HTTP {status} from {url}: a redirect, which is not followed")
    if status >= 400:
        raise HttpToolError(f"HTTP {status} from {url}: {text}")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HttpToolError(f"{url} sent a body that is not JSON: {text!r}") from exc
    if isinstance(data, dict) and isinstance(data.get("score"), int | float):
        return {key: value for key, value in data.items() if isinstance(value, int | float)}
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    raise HttpToolError(f'{url} sent {str(data)[:200]}; expected {{"score": <number>}}')
