"""The metrics of an evaluation run: accuracy, pass@k and mean reward over k samples per prompt
(docs/evaluations.md). Pure functions of the scored trajectories; both backends' evaluations and the
web app's checks of stored trajectories compute them alike."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from trainer.contract import (
    EVAL_ACC,
    EVAL_K,
    EVAL_PASS_AT_1,
    EVAL_PASS_AT_K,
    EVAL_PROMPTS,
    EVAL_REWARD_MEAN,
    PASS_THRESHOLD,
    TRAJECTORY_ACC,
)
from trainer.mdp import Trajectory
from trainer.rollout import accuracy


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k for one prompt from ``n`` samples of which ``c`` pass:
    1 - C(n - c, k) / C(n, k), the chance that k samples drawn from the n without replacement hold
    at least one that passes (Chen et al. 2021, docs/evaluations.md#pass-at-k)."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass@k needs n >= 1 samples and 0 <= c <= n passing ones, not n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, not k={k} with n={n}")
    if n - c < k:
        return 1.0  # every draw of k holds a passing sample
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def passes(acc: float) -> bool:
    return acc >= PASS_THRESHOLD


def record_accuracy(trajectories: Sequence[Trajectory]) -> None:
    """Put each sample's acc into its metrics, so that a stored trajectory carries what it scored."""
    for trajectory in trajectories:
        trajectory.metrics[TRAJECTORY_ACC] = accuracy(trajectory)


def evaluation_metrics(
    accuracies: Sequence[tuple[str, float]], rewards: Sequence[float], k: int
) -> dict[str, float]:
    """``eval/...`` of every sample's (group id, acc) and reward; each group holds a prompt's samples."""
    groups: dict[str, list[float]] = {}
    for group_id, acc in accuracies:
        groups.setdefault(group_id, []).append(acc)
    counts = [(len(accs), sum(passes(a) for a in accs)) for accs in groups.values()]
    return {
        EVAL_ACC: statistics.fmean(acc for _, acc in accuracies) if accuracies else 0.0,
        EVAL_PASS_AT_1: statistics.fmean(pass_at_k(n, c, 1) for n, c in counts) if counts else 0.0,
        EVAL_PASS_AT_K: statistics.fmean(pass_at_k(n, c, min(k, n)) for n, c in counts) if counts else 0.0,
        EVAL_REWARD_MEAN: statistics.fmean(rewards) if rewards else 0.0,
        EVAL_PROMPTS: float(len(groups)),
        EVAL_K: float(k),
    }


def metrics_of(trajectories: Sequence[Trajectory], k: int) -> dict[str, float]:
    """:func:`evaluation_metrics` of scored trajectories."""
    return evaluation_metrics(
        [(t.group_id, accuracy(t)) for t in trajectories], [t.total_reward for t in trajectories], k
    )
