"""Each health check fires on a series made to trip it and stays silent on a healthy one (pure: no database)."""

from __future__ import annotations

import math

import pytest

from trainer.contract import (
    ACTOR_CLIPFRAC,
    ACTOR_ENTROPY,
    ACTOR_KL,
    RESPONSE_LENGTH_MEAN,
    REWARD_MEAN,
    ROLLOUT_ZERO_VARIANCE_GROUPS,
    TOOLS_CALL_RATE,
    TOOLS_MALFORMED_RATE,
    val_key,
)
from webapp.monitoring.checks import (
    CHECKS,
    NON_FINITE_KEY,
    Context,
    Point,
    Reading,
    Series,
    all_checks,
    merge_window,
)

STEPS = range(1, 61)
LIMIT = Context(max_response_length=512, uses_tools=True)


def line(start: float, end: float, steps: range = STEPS) -> list[Point]:
    n = len(steps) - 1
    return [(step, start + (end - start) * i / n) for i, step in enumerate(steps)]


def wobble(level: float, amplitude: float, steps: range = STEPS) -> list[Point]:
    return [(step, level + amplitude * math.sin(step)) for step in steps]


HEALTHY: Series = {
    ACTOR_ENTROPY: line(1.2, 0.6),
    ACTOR_KL: line(0.0, 0.05),
    ACTOR_CLIPFRAC: wobble(0.05, 0.02),
    RESPONSE_LENGTH_MEAN: wobble(200, 20),
    REWARD_MEAN: line(0.1, 0.8),
    val_key("gsm8k"): line(0.2, 0.6, range(10, 61, 10)),
    ROLLOUT_ZERO_VARIANCE_GROUPS: wobble(0.2, 0.05),
    TOOLS_MALFORMED_RATE: wobble(0.03, 0.01),
    TOOLS_CALL_RATE: wobble(0.9, 0.05),
    NON_FINITE_KEY: [(step, 0.0) for step in STEPS],
}

TRIPPED: dict[str, Series] = {
    "entropy_collapse": {ACTOR_ENTROPY: line(1.2, 0.01)},
    "kl_blowup": {ACTOR_KL: line(0.0, 4.0)},
    "clip_fraction": {ACTOR_CLIPFRAC: line(0.05, 0.6)},
    "length_at_limit": {RESPONSE_LENGTH_MEAN: line(200, 505)},
    "reward_up_val_down": {REWARD_MEAN: line(0.1, 0.9), val_key("gsm8k"): [(10, 0.3), (20, 0.5), (30, 0.4), (40, 0.3)]},
    "length_reward_hacking": {REWARD_MEAN: line(0.1, 0.9), RESPONSE_LENGTH_MEAN: line(100, 400)},
    "zero_variance_groups": {ROLLOUT_ZERO_VARIANCE_GROUPS: line(0.2, 0.9)},
    "malformed_tool_calls": {TOOLS_MALFORMED_RATE: line(0.0, 0.5)},
    "tool_avoidance": {TOOLS_CALL_RATE: line(0.9, 0.0)},
    "tools_dropped_reward_rose": {REWARD_MEAN: line(0.1, 0.9), TOOLS_CALL_RATE: line(1.0, 0.2)},
    "stalled_reward": {REWARD_MEAN: line(0.1, 0.5, range(1, 21)) + wobble(0.5, 0.002, range(21, 61))},
    "non_finite": {NON_FINITE_KEY: [(step, float(step == 60)) for step in STEPS]},
}  # fmt: skip


def judge(name: str, series: Series, context: Context = LIMIT) -> Reading | None:
    """What the check says after seeing the series one point per step, as ingestion feeds it."""
    check = CHECKS.get(name)
    window: dict[str, list[Point]] = {}
    reading = None
    for step in STEPS:
        new = {key: [p for p in points if p[0] == step] for key, points in series.items()}
        window = merge_window(window, new, check)
        reading = check.evaluate(window, check.threshold, context) or reading
    return reading


def test_every_check_has_a_tripping_series() -> None:
    assert sorted(TRIPPED) == sorted(check.name for check in all_checks())


@pytest.mark.parametrize("name", sorted(TRIPPED))
def test_the_check_fires_on_a_series_made_to_trip_it(name: str) -> None:
    reading = judge(name, {**HEALTHY, **TRIPPED[name]})
    assert reading is not None and reading.firing, reading


@pytest.mark.parametrize("name", sorted(TRIPPED))
def test_the_check_stays_silent_on_a_healthy_run(name: str) -> None:
    reading = judge(name, HEALTHY)
    assert reading is not None and not reading.firing, reading


def test_length_at_the_limit_needs_the_limit() -> None:
    assert judge("length_at_limit", TRIPPED["length_at_limit"], Context()) is None


def test_the_window_drops_non_finite_points_and_keeps_the_last_steps() -> None:
    check = CHECKS.get("kl_blowup")
    window = merge_window(
        {ACTOR_KL: [(1, 0.1), (2, 0.2)]}, {ACTOR_KL: [(3, math.nan), (4, 0.4), (5, 0.5)]}, check
    )
    assert window == {ACTOR_KL: [(2, 0.2), (4, 0.4), (5, 0.5)]}


def test_the_tool_checks_arm_only_after_the_warm_up_the_run_sets() -> None:
    # Malformed from the start, clean from step 40: the first 40 steps are the run's warm-up.
    learning = {TOOLS_MALFORMED_RATE: line(0.9, 0.9, range(1, 41)) + line(0.0, 0.0, range(41, 61))}
    reading = judge("malformed_tool_calls", learning, Context(uses_tools=True, tool_warmup_steps=40))
    assert reading is not None and not reading.firing
    early = [(step, 0.9) for step in range(1, 41)]
    assert judge("malformed_tool_calls", {TOOLS_MALFORMED_RATE: early}, Context(tool_warmup_steps=40)) is None
    assert judge("malformed_tool_calls", {TOOLS_MALFORMED_RATE: early}, Context()) == Reading(True, 40, 0.9)
    avoiding = {TOOLS_CALL_RATE: [(step, 0.0) for step in range(1, 41)]}
    assert judge("tool_avoidance", avoiding, Context(uses_tools=True, tool_warmup_steps=40)) is None
    assert judge("tool_avoidance", avoiding, Context(uses_tools=True)) == Reading(True, 40, 0.0)


def test_the_tool_use_checks_say_nothing_about_a_run_without_tools() -> None:
    for name in ("tool_avoidance", "tools_dropped_reward_rose"):
        assert judge(name, {**HEALTHY, **TRIPPED[name]}, Context()) is None


def test_tools_dropped_while_reward_rose_says_so_in_plain_words() -> None:
    check = CHECKS.get("tools_dropped_reward_rose")
    assert check.explains.startswith("The policy stopped using its tools while its reward rose")
    steady_reward = {REWARD_MEAN: line(0.5, 0.5), TOOLS_CALL_RATE: line(1.0, 0.2)}
    assert not judge("tools_dropped_reward_rose", steady_reward).firing  # type: ignore[union-attr]
