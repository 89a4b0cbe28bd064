"""The RL health checks (docs/health.md#checks): pure functions over a run's metric series.

Each check watches a few metric keys and keeps the last ``window`` points of each; at every metric
batch the web app hands it those points (the stored window plus the new ones, never a rescan of the
run) and the threshold the team chose, and the check answers a :class:`Reading` (firing or not, with
the step and the value that decided it) or None when the series is still too short to judge. No
Django here: the checks are tested on synthetic series alone.

``CHECKS`` is the one registry; :data:`NON_FINITE_KEY` is the series the web app derives from each
batch (how many values of a step were NaN or ±Infinity), since every other check drops such points.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from trainer.contract import (
    ACTOR_CLIPFRAC,
    ACTOR_ENTROPY,
    ACTOR_KL,
    RESPONSE_LENGTH_MEAN,
    REWARD_MEAN,
    ROLLOUT_ZERO_VARIANCE_GROUPS,
    TOOLS_CALL_RATE,
    TOOLS_MALFORMED_RATE,
    VAL_METRIC,
    VAL_PREFIX,
)
from trainer.registry import Registry

Point = tuple[int, float]  # (step, value), in step order
Series = Mapping[str, Sequence[Point]]  # metric key -> its recent points

# Values of one step that were NaN or ±Infinity, under any key; derived at ingestion, never stored.
NON_FINITE_KEY = "health/non_finite"
VAL_KEYS = f"{VAL_PREFIX}*/{VAL_METRIC}"  # val/<task>/acc, every task


@dataclass(frozen=True)
class Context:
    """What a check may know about the run besides its metrics."""

    max_response_length: int | None = None  # data.max_response_length of the run's config
    uses_tools: bool = False  # the run's config offers tools (rollout.tools)
    tool_warmup_steps: int = 0  # rollout.tool_warmup_steps: steps the tool-use checks do not judge


@dataclass(frozen=True)
class Reading:
    firing: bool
    step: int  # the step the verdict is about (the latest one the check looked at)
    value: float  # the quantity compared with the threshold


Evaluate = Callable[[Series, float, Context], Reading | None]


@dataclass(frozen=True)
class HealthCheck:
    name: str
    label: str
    explains: str  # what firing means and what to look at, shown on the run page
    keys: tuple[str, ...]  # metric keys or fnmatch patterns (val/*/acc)
    threshold: float  # the default; teams change it (HealthRule)
    window: int  # points kept per key
    evaluate: Evaluate

    def watches(self, key: str) -> bool:
        return any(key == pattern or fnmatch.fnmatchcase(key, pattern) for pattern in self.keys)


CHECKS: Registry[HealthCheck] = Registry("health check")


def check(
    name: str, label: str, explains: str, keys: tuple[str, ...], threshold: float, window: int
) -> Callable[[Evaluate], Evaluate]:
    def register(evaluate: Evaluate) -> Evaluate:
        CHECKS.add(name, HealthCheck(name, label, explains, keys, threshold, window, evaluate))
        return evaluate

    return register


def all_checks() -> list[HealthCheck]:
    return [CHECKS.get(name) for name in CHECKS.names()]


# -- helpers --------------------------------------------------------------------------------------

RECENT = 3  # points averaged for "the current level" of a noisy series


def _recent(points: Sequence[Point], n: int = RECENT) -> Reading | None:
    """(latest step, mean of the last n values), or None with fewer than n points."""
    if len(points) < n:
        return None
    return Reading(False, points[-1][0], fmean(value for _, value in points[-n:]))


def _above(series: Series, key: str, threshold: float) -> Reading | None:
    level = _recent(series.get(key, ()))
    return None if level is None else Reading(level.value > threshold, level.step, level.value)


def _slope(points: Sequence[Point]) -> float:
    """Least-squares slope of value over step."""
    steps = [float(step) for step, _ in points]
    values = [value for _, value in points]
    mean_step, mean_value = fmean(steps), fmean(values)
    spread = sum((s - mean_step) ** 2 for s in steps)
    if spread == 0:
        return 0.0
    return sum((s - mean_step) * (v - mean_value) for s, v in zip(steps, values, strict=True)) / spread


def _matching(series: Series, pattern: str) -> list[Sequence[Point]]:
    return [points for key, points in sorted(series.items()) if fnmatch.fnmatchcase(key, pattern)]


# -- the checks -----------------------------------------------------------------------------------


@check(
    "entropy_collapse",
    "Entropy collapse",
    "The policy's token entropy fell below the threshold: it samples almost deterministically and "
    "stops exploring.",
    (ACTOR_ENTROPY,),
    threshold=0.05,
    window=RECENT,
)
def entropy_collapse(series: Series, threshold: float, context: Context) -> Reading | None:
    level = _recent(series.get(ACTOR_ENTROPY, ()))
    return None if level is None else Reading(level.value < threshold, level.step, level.value)


@check(
    "kl_blowup",
    "KL blow-up",
    "KL to the reference policy rose above the threshold: the policy is leaving the reference fast "
    "(learning rate, KL coefficient).",
    (ACTOR_KL,),
    threshold=1.0,
    window=RECENT,
)
def kl_blowup(series: Series, threshold: float, context: Context) -> Reading | None:
    return _above(series, ACTOR_KL, threshold)


@check(
    "clip_fraction",
    "Clip fraction too high",
    "More than the threshold's share of tokens hit the PPO clip: the updates are too large for the "
    "trust region.",
    (ACTOR_CLIPFRAC,),
    threshold=0.3,
    window=RECENT,
)
def clip_fraction(series: Series, threshold: float, context: Context) -> Reading | None:
    return _above(series, ACTOR_CLIPFRAC, threshold)


@check(
    "length_at_limit",
    "Response length at the limit",
    "The mean response length reached the threshold's fraction of data.max_response_length: "
    "responses are being cut off.",
    (RESPONSE_LENGTH_MEAN,),
    threshold=0.9,
    window=RECENT,
)
def length_at_limit(series: Series, threshold: float, context: Context) -> Reading | None:
    level = _recent(series.get(RESPONSE_LENGTH_MEAN, ()))
    if level is None or not context.max_response_length:
        return None
    share = level.value / context.max_response_length
    return Reading(share >= threshold, level.step, share)


TREND = 10  # points a trend needs


@check(
    "reward_up_val_down",
    "Reward up, validation down",
    "Training reward keeps rising while validation fell by more than the threshold from its best: "
    "the policy overfits or games the training reward.",
    (REWARD_MEAN, VAL_KEYS),
    threshold=0.05,
    window=50,
)
def reward_up_val_down(series: Series, threshold: float, context: Context) -> Reading | None:
    reward = series.get(REWARD_MEAN, ())
    validations = [points for points in _matching(series, VAL_KEYS) if len(points) >= 2]
    if len(reward) < TREND or not validations:
        return None
    rising = _slope(reward) > 0
    drops = [(max(v for _, v in points) - points[-1][1], points[-1][0]) for points in validations]
    drop, step = max(drops)
    return Reading(rising and drop > threshold, max(step, reward[-1][0]), drop)


@check(
    "length_reward_hacking",
    "Length and reward rising together",
    "Over the last 50 steps response length grew by more than the threshold (a fraction) while "
    "reward rose: the reward may pay for length (reward hacking).",
    (REWARD_MEAN, RESPONSE_LENGTH_MEAN),
    threshold=0.5,
    window=50,
)
def length_reward_hacking(series: Series, threshold: float, context: Context) -> Reading | None:
    reward, length = series.get(REWARD_MEAN, ()), series.get(RESPONSE_LENGTH_MEAN, ())
    if len(reward) < TREND or len(length) < TREND:
        return None
    before = fmean(v for _, v in length[:RECENT])
    after = fmean(v for _, v in length[-RECENT:])
    growth = (after - before) / before if before > 0 else 0.0
    return Reading(growth > threshold and _slope(reward) > 0, length[-1][0], growth)


@check(
    "zero_variance_groups",
    "Groups with nothing to learn",
    "More than the threshold's share of GRPO groups had all-equal rewards, so zero advantage: "
    "the prompts are too easy or too hard.",
    (ROLLOUT_ZERO_VARIANCE_GROUPS,),
    threshold=0.5,
    window=RECENT,
)
def zero_variance_groups(series: Series, threshold: float, context: Context) -> Reading | None:
    return _above(series, ROLLOUT_ZERO_VARIANCE_GROUPS, threshold)


def _warm(series: Series, key: str, context: Context) -> list[Point]:
    """The key's points after the run's tool warm-up (docs/health.md#tool-use)."""
    return [point for point in series.get(key, ()) if point[0] > context.tool_warmup_steps]


@check(
    "malformed_tool_calls",
    "Malformed tool calls",
    "More than the threshold's share of tool calls could not be parsed: the model has not learned "
    "the tool format.",
    (TOOLS_MALFORMED_RATE,),
    threshold=0.2,
    window=RECENT,
)
def malformed_tool_calls(series: Series, threshold: float, context: Context) -> Reading | None:
    return _above(
        {TOOLS_MALFORMED_RATE: _warm(series, TOOLS_MALFORMED_RATE, context)}, TOOLS_MALFORMED_RATE, threshold
    )


@check(
    "tool_avoidance",
    "Tools not used",
    "Fewer than the threshold's share of trajectories called a tool, though the run offers tools: "
    "the policy answers without them.",
    (TOOLS_CALL_RATE,),
    threshold=0.1,
    window=RECENT,
)
def tool_avoidance(series: Series, threshold: float, context: Context) -> Reading | None:
    if not context.uses_tools:
        return None
    level = _recent(_warm(series, TOOLS_CALL_RATE, context))
    return None if level is None else Reading(level.value < threshold, level.step, level.value)


@check(
    "tools_dropped_reward_rose",
    "Tools dropped while reward rose",
    "The policy stopped using its tools while its reward rose: it learned to answer without calling "
    "them. The reward may pay for answers that need no tool, or calls that failed cost more than they "
    "earned; read the latest trajectories.",
    (REWARD_MEAN, TOOLS_CALL_RATE),
    threshold=0.3,
    window=50,
)
def tools_dropped_reward_rose(series: Series, threshold: float, context: Context) -> Reading | None:
    calls = _warm(series, TOOLS_CALL_RATE, context)
    reward = _warm(series, REWARD_MEAN, context)
    if not context.uses_tools or len(calls) < TREND or len(reward) < TREND:
        return None
    drop = max(v for _, v in calls) - fmean(v for _, v in calls[-RECENT:])
    return Reading(drop > threshold and _slope(reward) > 0, calls[-1][0], drop)


PATIENCE = 20  # steps without improvement before the reward counts as stalled


@check(
    "stalled_reward",
    "Reward stalled",
    f"The best reward of the last {PATIENCE} steps is no more than the threshold above the best of "
    f"the {PATIENCE} before: training stopped improving.",
    (REWARD_MEAN,),
    threshold=0.01,
    window=2 * PATIENCE,
)
def stalled_reward(series: Series, threshold: float, context: Context) -> Reading | None:
    reward = series.get(REWARD_MEAN, ())
    if len(reward) < 2 * PATIENCE:
        return None
    earlier = max(v for _, v in reward[-2 * PATIENCE : -PATIENCE])
    gain = max(v for _, v in reward[-PATIENCE:]) - earlier
    return Reading(gain <= threshold, reward[-1][0], gain)


@check(
    "non_finite",
    "NaN or Inf",
    "A metric of this step was NaN or ±Infinity (a loss, a gradient norm, a reward): the update "
    "diverged or a reward function failed.",
    (NON_FINITE_KEY,),
    threshold=0.0,
    window=1,
)
def non_finite(series: Series, threshold: float, context: Context) -> Reading | None:
    points = series.get(NON_FINITE_KEY, ())
    if not points:
        return None
    step, count = points[-1]
    return Reading(count > threshold, step, count)


# -- windows --------------------------------------------------------------------------------------


def merge_window(kept: Series, new: Series, health_check: HealthCheck) -> dict[str, list[Point]]:
    """The check's window after a batch: its keys' kept points and new finite points, one per step
    (a later value of a step replaces an earlier one), the last ``window`` steps of each key."""
    merged: dict[str, list[Point]] = {}
    for key in {*kept, *new}:
        if not health_check.watches(key):
            continue
        by_step = {int(step): float(value) for step, value in kept.get(key, ())}
        by_step.update((int(s), float(v)) for s, v in new.get(key, ()) if math.isfinite(v))
        merged[key] = sorted(by_step.items())[-health_check.window :]
    return merged
