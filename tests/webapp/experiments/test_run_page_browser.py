"""Real Chromium on the run page: a finished run's story at a glance; a cancel that asks first and
ends with the name of who cancelled; a short run's charts and checkpoint list at laptop widths."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainer.contract import (
    PERF_TOKENS_PER_S,
    REWARD_MEAN,
    TIMING_GENERATE_S,
    TIMING_STEP_S,
    TIMING_UPDATE_ACTOR_S,
    val_key,
)
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import metrics_store
from webapp.ingestion.models import Checkpoint, LogChunk

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

STARTED = datetime(2025, 6, 30, 14, 0, 5, tzinfo=UTC)


@pytest.fixture
def finished(transactional_db: Any, personas: Any) -> Run:
    experiment = Experiment.objects.create(
        team=personas["acme"], name="gsm8k grpo", task="gsm8k", preset="grpo"
    )
    run = Run.objects.create(
        experiment=experiment, team=experiment.team, seed=7, name="the long one", status=RunStatus.SUCCEEDED,
        step=40, total_steps=40, started_at=STARTED, finished_at=STARTED + timedelta(hours=1, minutes=2, seconds=9),
        config={"task": "gsm8k", "preset": "grpo", "rollout": {"n": 8}},
    )  # fmt: skip
    rewards = [0.1 + 0.02 * step for step in range(40)]
    rewards[30] = 0.95
    points = [{"key": REWARD_MEAN, "step": s, "value": v, "ts": 1.7e9 + s} for s, v in enumerate(rewards)]
    points += [
        {"key": val_key("gsm8k"), "step": s, "value": s / 100, "ts": 1.7e9 + s} for s in (10, 20, 30, 39)
    ]
    metrics_store.write_points(run.pk, "m", points)
    for step in (20, 40):
        Checkpoint.objects.create(
            run=run, step=step, path=f"/ckpt/run/step-{step}", metrics={REWARD_MEAN: rewards[step - 1]}
        )
    LogChunk.objects.create(
        run=run, seq=0, text="".join(f"step {i}: ok\n" for i in range(300)) + "status succeeded\n"
    )
    return run


def test_a_finished_runs_page_tells_its_story_at_a_glance(
    signed_in: Callable[[str], Any], live_server: Any, finished: Run
) -> None:
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/{finished.pk}/")
    assert page.inner_text("h1") == "the long one"
    assert "the long one" not in page.inner_text("nav.subnav")  # the title says the run once
    assert page.inner_text("#run-started") == "2025-06-30 14:00:05"
    assert page.inner_text("#run-ended") == "2025-06-30 15:02:14"
    assert page.inner_text("#run-duration") == "1h 02m"
    assert page.locator("#run-eta").count() == 0  # finished: nothing left to estimate
    assert page.inner_text("#run-progress").strip() == "step 40 of 40"
    reward = page.inner_text("#run-reward")
    assert "0.88 latest, step 39" in reward and "best 0.95 at step 30" in reward
    assert "0.39 latest, step 39" in page.inner_text("#run-validation")
    assert page.locator("#checkpoints tbody tr").all_inner_texts()[0].startswith("20\t")
    assert "rollout.n\n8" in page.inner_text("#config-summary").replace("\t", "\n")
    # the log opens on its newest line
    last_line_visible = page.evaluate(
        """() => {
            const box = document.querySelector('.log-box').getBoundingClientRect();
            const log = document.getElementById('log').getBoundingClientRect();
            return log.height > box.height && Math.abs(log.bottom - box.bottom) < 2;
        }"""
    )
    assert last_line_visible


def test_cancel_asks_first_and_the_run_ends_cancelled_by_the_user(
    signed_in: Callable[[str], Any], live_server: Any, finished: Run
) -> None:
    running = Run.objects.create(experiment=finished.experiment, team=finished.team, seed=8, name="to cancel")
    running.enqueue()
    running.claim("test", "test-claimant")
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{running.pk}/")
    page.click("#cancel-run")
    page.wait_for_url("**/cancel/")
    assert Run.objects.get(pk=running.pk).cancel_requested is False  # asking is not cancelling
    assert "cancelled by alice" in page.inner_text("main")
    page.click("#confirm-cancel")
    page.wait_for_url(f"**/runs/{running.pk}/")
    assert Run.objects.get(pk=running.pk).cancelled_by.username == "alice"  # type: ignore[union-attr]
    # The trainer stops at the end of its step and reports it; the page, polling, shows who cancelled.
    Run.objects.get(pk=running.pk).finish(RunStatus.CANCELLED, "stopped by SIGTERM")
    page.wait_for_function("() => document.getElementById('run-status').textContent.trim() === 'cancelled'")
    assert page.inner_text("#run-message") == "cancelled by alice"


@pytest.fixture
def two_steps(finished: Run) -> Run:
    """A 2-step run that timed its steps and saved a checkpoint where a launched run keeps them."""
    run = Run.objects.create(
        experiment=finished.experiment, team=finished.team, seed=1, name="short", status=RunStatus.SUCCEEDED,
        step=2, total_steps=2, started_at=STARTED, finished_at=STARTED + timedelta(minutes=3),
    )  # fmt: skip
    parts = {TIMING_STEP_S: 3.0, TIMING_GENERATE_S: 1.5, TIMING_UPDATE_ACTOR_S: 1.0, PERF_TOKENS_PER_S: 420.0}
    points = [
        {"key": k, "step": s, "value": v * s, "ts": 1.7e9 + s} for s in (1, 2) for k, v in parts.items()
    ]
    metrics_store.write_points(run.pk, "t", points)
    Checkpoint.objects.create(
        run=run, step=2, path=f"/srv/studio/var/runs/{run.pk}/checkpoints/step_00000002", size_bytes=271_000_000,
        metrics={REWARD_MEAN: 0.25, val_key("gsm8k"): 0.5, "actor/entropy": 1.25},
    )  # fmt: skip
    return run


def test_a_short_runs_charts_tick_whole_steps_and_its_checkpoints_fit_a_laptop_screen(
    signed_in: Callable[[str], Any], live_server: Any, two_steps: Run
) -> None:
    page = signed_in("alice")  # an owner: the Evaluate link is there
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/t/acme/runs/{two_steps.pk}/")
        page.wait_for_function("() => window.studioTimeCharts && window.studioTimeCharts.tokens")
        # uPlot keeps each axis's tick values in _splits: one tick per step, none between two steps
        ticks = page.evaluate(
            "() => ['plot', 'tokens'].map((c) => window.studioTimeCharts[c].axes[0]._splits)"
        )
        assert ticks == [[1, 2], [1, 2]], width
        edges = page.evaluate(
            """() => {
                const right = (el) => el.getBoundingClientRect().right;
                const table = document.getElementById('checkpoints');
                return {main: right(document.querySelector('main')), section: right(table.closest('section')),
                        table: right(table), evaluate: right(table.querySelector('a.evaluate')),
                        page: document.documentElement.clientWidth, scrolls: document.documentElement.scrollWidth};
            }"""
        )
        assert edges["evaluate"] <= edges["table"] <= edges["section"] <= edges["main"], (width, edges)
        assert edges["scrolls"] <= edges["page"], (width, edges)  # nothing runs past the right edge
