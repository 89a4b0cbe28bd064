"""Real Chromium: compare 4 runs picked in the runs table and 3+ rollouts of one prompt across them
(docs/runs-and-curves.md#compare-runs), then click a histogram bar and a heat-map cell and get
exactly their rollouts (docs/rollouts.md#histograms). Screenshots at 1440 and 1024 px."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.trainer_posts import trajectory
from trainer.contract import REWARD_MEAN, TrajectoryBatch
from webapp.ingestion import metrics_store, trajectories

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/compare")
REWARDS = [0.0, 0.0, 0.25, 0.5, 0.5, 0.5, 1.0, 1.0]  # one group of 8 at each step


@pytest.fixture
def four_runs(transactional_db: Any, personas: Any) -> list[Any]:
    from webapp.experiments.models import Experiment, Run

    metrics_store.forget_cached_keys()
    experiment = Experiment.objects.create(
        team=personas["acme"], name="lr sweep", task="gsm8k", preset="grpo"
    )
    runs = []
    for seed, lr in enumerate((1e-6, 3e-6, 1e-5, 3e-5)):
        run = Run.objects.create(
            experiment=experiment,
            team=personas["acme"],
            seed=seed,
            name=f"lr {lr:g}",
            config={"optim": {"lr": lr}, "rollout": {"n": 8}, "algorithm": {"kl_coef": 0.001 * (seed % 2)}},
        )
        points = [
            {"key": REWARD_MEAN, "step": s, "value": min(1.0, 0.1 + s * 0.02 * (seed + 1)), "ts": 1.7e9 + s}
            for s in range(30)
        ]
        metrics_store.write_points(run.pk, "m", points)
        for step in (1, 2):
            batch = [
                trajectory(
                    f"s{step}-p3-s{k}",
                    f"s{step}-p3",
                    reward,
                    response=f"so the answer is {k + seed} {'x ' * k}",
                )
                for k, reward in enumerate(REWARDS)
            ]
            parsed = TrajectoryBatch.model_validate({"training_step": step, "trajectories": batch})
            trajectories.store_batch(run, parsed, f"b{step}")
        runs.append(run)
    return runs


def rewards_listed(page: Any) -> list[str]:
    """The Reward column of the rollout list, found by its header (a member's list starts with tick boxes)."""
    headers = [h.strip() for h in page.locator("#rollout-table thead th").all_inner_texts()]
    column = headers.index("Reward") + 1
    return list(page.locator(f"#rollout-table tbody tr td:nth-child({column})").all_inner_texts())


def _shots(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_compare_four_runs_and_one_prompt_across_them(
    signed_in: Callable[[str], Any], live_server: Any, four_runs: list[Any]
) -> None:
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/")
    for run in four_runs:
        page.check(f"#select-run-{run.pk}")
    page.click("button[value='compare']")
    page.wait_for_url("**/runs/compare/?*")
    assert page.locator("#compare-results thead th a[href*='/runs/']").count() == 4
    assert "optim.lr" in page.inner_text("#compare-runs") and "rollout.n" not in page.inner_text(
        "#compare-runs"
    )
    page.wait_for_function("() => window.studioCompareChart && window.studioCompareChart.plot")
    assert page.evaluate("() => window.studioCompareChart.plot.series.length") == 5  # x and 4 runs
    page.click(f"#compare-results a[href*='baseline={four_runs[1].pk}']")
    page.wait_for_url(f"**baseline={four_runs[1].pk}*")
    assert "-32.0%" in page.inner_text("#compare-results")  # lr 1e-6's final 0.68 against 3e-6's 1.0
    page.select_option("#compare-mode", "change")
    page.wait_for_function("() => window.studioCompareChart.mode === 'change'")
    _shots(page, "compare-4-runs")

    # The rows offered are those the runs rolled out in common: here row 3, in all four
    assert page.locator("#id_sample option").all_inner_texts() == ["row 3 · in 4 of 4 runs"]
    page.select_option("#id_sample", "3")
    page.click("#prompt-across button")
    page.wait_for_url("**/prompts/3/compare/?*")
    headers = page.locator("#compare-many thead th").all_inner_texts()
    assert len(headers) == 5 and all("step 2" in h for h in headers[1:])  # each run's newest step
    assert page.locator("#compare-many tr.aligned-step").count() == 2  # both steps aligned
    assert page.locator("#compare-many span.added").count() >= 3  # words against the first
    _shots(page, "prompt-across-4-runs")


def test_a_histogram_bar_and_a_heat_map_cell_open_exactly_their_rollouts(
    signed_in: Callable[[str], Any], live_server: Any, four_runs: list[Any]
) -> None:
    run = four_runs[0]
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/{run.pk}/rollouts/")
    page.click("nav.subnav a:has-text('Histograms')")
    page.wait_for_function("() => window.studioHistograms && window.studioHistograms.bars")
    _shots(page, "histograms-reward")
    # The bar of the largest reward: the last bin, [0.95, 1.0], holding the two rewards of 1.0.
    page.locator("#histogram").scroll_into_view_if_needed()
    box = page.evaluate(
        """() => { const u = window.studioHistograms.bars, i = u.data[0].length - 1;
                   const r = u.over.getBoundingClientRect();
                   return {x: r.left + u.valToPos(i, 'x'), y: r.top + u.valToPos(u.data[1][i] / 2, 'y'),
                           count: u.data[1][i]}; }"""
    )
    assert box["count"] == 2
    page.mouse.move(box["x"], box["y"])
    page.mouse.click(box["x"], box["y"])
    page.wait_for_url("**/rollouts/?step=2&measure=reward*")
    assert "2 trajectories" in page.inner_text("#rollout-table")
    assert rewards_listed(page) == ["1.000", "1.000"]
    _shots(page, "histogram-bin-rollouts")

    page.go_back()
    page.wait_for_function("() => window.studioHistograms && window.studioHistograms.heat")
    # The heat-map's cell of step 1 and the lowest rewards: the two zeros.
    page.locator("#heat-map").scroll_into_view_if_needed()
    cell = page.evaluate(
        """() => { const u = window.studioHistograms.heat, r = u.over.getBoundingClientRect();
                   return {x: r.left + u.valToPos(1.5, 'x'), y: r.top + u.valToPos(0.01, 'y')}; }"""
    )
    page.mouse.move(cell["x"], cell["y"])
    page.mouse.click(cell["x"], cell["y"])
    page.wait_for_url("**step_min=1&step_max=1*")
    assert "2 trajectories" in page.inner_text("#rollout-table")
    assert rewards_listed(page) == ["0.000", "0.000"]
