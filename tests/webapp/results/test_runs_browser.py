"""Real Chromium on the runs table and the curve workspace: sort, filter and group; three runs
overlaid; a seed group's band; a zoom that survives live refreshes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainer.contract import ACTOR_KL, REWARD_MEAN, TOOLS_ERROR_RATE
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import metrics_store

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]


def _run(experiment: Experiment, seed: int, reward: float, kl_coef: float, *, steps: int = 10,
         status: str = RunStatus.SUCCEEDED) -> Run:  # fmt: skip
    run = Run.objects.create(
        experiment=experiment, team=experiment.team, seed=seed, name=f"{experiment.name} seed {seed}", status=status,
        config={"preset": experiment.preset, "algorithm": {"kl_coef": kl_coef}},
    )  # fmt: skip
    points = [{"key": key, "step": step, "value": value, "ts": 1.7e9 + step}
              for step in range(steps) for key, value in ((REWARD_MEAN, reward), (ACTOR_KL, kl_coef))]  # fmt: skip
    metrics_store.write_points(run.pk, f"m{run.pk}", points)
    return run


@pytest.fixture
def experiments(transactional_db: Any, personas: Any) -> dict[str, Any]:
    acme = personas["acme"]
    grpo = Experiment.objects.create(team=acme, name="grpo", task="gsm8k", preset="grpo", seeds=[1, 2, 3])
    ppo = Experiment.objects.create(team=acme, name="ppo", task="gsm8k", preset="ppo", seeds=[1])
    seeds = [_run(grpo, seed, reward, 0.01 * seed) for seed, reward in ((1, 0.2), (2, 0.4), (3, 0.6))]
    return {"grpo": grpo, "ppo": ppo, "seeds": seeds, "ppo_run": _run(ppo, 1, 0.5, 0.05)}


def _names(page: Any) -> list[str]:
    return page.locator("#runs tbody tr td:nth-child(2)").all_inner_texts()


def test_the_runs_table_sorts_filters_and_groups_on_the_server(
    signed_in: Callable[[str], Any], live_server: Any, experiments: dict[str, Any]
) -> None:
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/")
    by_reward = [
        r.name
        for r in sorted(Run.objects.all(), key=lambda r: -metrics_store.latest_values(r.pk)[REWARD_MEAN][1])
    ]
    page.click(f"#runs thead a[data-column='last:{REWARD_MEAN}']")
    page.wait_for_url("**sort=-last*")
    assert _names(page) == by_reward  # numbers sort from the top down on the first click
    page.click(f"#runs thead a[data-column='last:{REWARD_MEAN}']")
    page.wait_for_url("**sort=last*")
    assert _names(page) == by_reward[::-1]

    page.select_option("#fc-1", "preset")
    page.select_option("#fo-1", "eq")
    page.fill("#fv-1", "grpo")
    page.click("#table-query button[type=submit]")
    page.wait_for_url("**fv=grpo*")
    assert sorted(_names(page)) == sorted(r.name for r in experiments["seeds"])
    assert page.inner_text("#runs-count") == "3 runs"

    page.click("text=Clear")
    page.wait_for_url(f"{live_server.url}/t/acme/runs/")
    page.select_option("#group-by", "preset")
    page.click("#table-query button[type=submit]")
    page.wait_for_selector("tr.group-row")
    groups = {
        row.split("\t")[0]: row.split("\t")[1:] for row in page.locator("tr.group-row").all_inner_texts()
    }
    assert set(groups) == {"grpo", "ppo"} and groups["grpo"][0] == "3" and groups["ppo"][0] == "1"
    headers = page.locator("#runs thead th").all_inner_texts()
    reward = groups["grpo"][headers.index(f"{REWARD_MEAN} (latest)") - 2 + 1]
    assert reward.startswith("0.4") and "0.2 to 0.6" in reward  # the mean of the three seeds, their range


def test_three_selected_runs_overlay_in_every_panel_each_in_one_colour(
    signed_in: Callable[[str], Any], live_server: Any, experiments: dict[str, Any]
) -> None:
    chosen = [*experiments["seeds"][:2], experiments["ppo_run"]]
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/")
    for run in chosen:
        page.check(f"#select-run-{run.pk}")
    page.click("#runs-actions button[value=overlay]")
    page.wait_for_url("**/curves/?run=*")
    page.wait_for_function(f"() => window.studioCharts && window.studioCharts.get('{ACTOR_KL}')")
    colours = page.evaluate(
        """(keys) => keys.map((key) => window.studioCharts.get(key)._studio.items.map((i) => [i.run, i.color]))""",
        [REWARD_MEAN, ACTOR_KL],
    )
    assert colours[0] == colours[1]  # the same run, the same colour, in every panel
    assert sorted(run for run, _colour in colours[0]) == sorted(r.pk for r in chosen)
    assert len({colour for _run, colour in colours[0]}) == 3
    values = page.evaluate(
        f"() => window.studioCharts.get('{REWARD_MEAN}')._studio.items.map((i) => i.series.value[0])"
    )
    assert sorted(values) == [0.2, 0.4, 0.5]


def test_a_seed_group_draws_its_mean_inside_a_min_max_band(
    signed_in: Callable[[str], Any], live_server: Any, experiments: dict[str, Any]
) -> None:
    for run in experiments["seeds"]:  # no tool ever failed: a flat line at 0
        metrics_store.write_points(run.pk, "tools", [{"key": TOOLS_ERROR_RATE, "step": s, "value": 0.0, "ts": 1.7e9 + s} for s in range(10)])  # fmt: skip
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/experiments/{experiments['grpo'].pk}/curves/?smoothing=0")
    page.wait_for_function(f"() => window.studioCharts && window.studioCharts.get('{TOOLS_ERROR_RATE}')")
    y_ranges = page.evaluate(
        """(keys) => keys.map((key) => {
            const y = window.studioCharts.get(key).scales.y;
            return [y.min, y.max];
        })""",
        [TOOLS_ERROR_RATE, REWARD_MEAN],
    )
    assert y_ranges[0] == [-1, 1]  # a small range around 0, not uPlot's 0 to 100
    assert 0 <= y_ranges[1][0] < 0.2 and 0.6 < y_ranges[1][1] < 1  # other curves keep uPlot's padding
    drawn = page.evaluate(
        f"""() => {{
            const u = window.studioCharts.get('{REWARD_MEAN}');
            const item = u._studio.items[0];
            return {{kind: item.kind, runs: item.runs, bands: u.bands.map((b) => b.series),
                     mean: u.data[1], low: u.data[2], high: u.data[3], items: u._studio.items.length}};
        }}"""
    )
    assert drawn["kind"] == "group" and drawn["items"] == 1
    assert sorted(drawn["runs"]) == sorted(r.pk for r in experiments["seeds"])
    assert drawn["bands"] == [[3, 2]]  # filled from the max line down to the min line
    assert all(abs(v - 0.4) < 1e-9 for v in drawn["mean"]) and len(drawn["mean"]) == 10
    assert set(drawn["low"]) == {0.2} and set(drawn["high"]) == {0.6}
    page.uncheck("#group-seeds")  # split: one line per seed again
    assert page.evaluate(f"() => window.studioCharts.get('{REWARD_MEAN}')._studio.items.length") == 3
    # a panel's log scale is kept for this user and experiment
    with page.expect_response("**/curves/layout/"):
        page.click(f"figure[data-key='{ACTOR_KL}'] form[data-action=log] button")
    assert page.evaluate(f"() => window.studioCharts.get('{ACTOR_KL}').scales.y.distr") == 3
    page.reload()
    page.wait_for_function(f"() => window.studioCharts && window.studioCharts.get('{ACTOR_KL}')")
    assert page.evaluate(f"() => window.studioCharts.get('{ACTOR_KL}').scales.y.distr") == 3


def test_a_zoom_survives_two_live_refreshes_and_reads_the_zoomed_steps_raw(
    signed_in: Callable[[str], Any], live_server: Any, experiments: dict[str, Any]
) -> None:
    live = _run(experiments["ppo"], 2, 0.3, 0.02, steps=3000, status=RunStatus.RUNNING)
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{live.pk}/curves/")
    page.wait_for_function(f"() => window.studioCharts && window.studioCharts.get('{REWARD_MEAN}')")
    assert (
        page.evaluate(f"() => window.studioCharts.get('{REWARD_MEAN}').data[0].length") < 1100
    )  # downsampled
    box = page.evaluate(
        f"""() => {{
            const u = window.studioCharts.get('{REWARD_MEAN}');
            const r = u.over.getBoundingClientRect();
            return [r.left + u.valToPos(1000, 'x'), r.left + u.valToPos(1200, 'x'), r.top + r.height / 2];
        }}"""
    )
    page.mouse.move(box[0], box[2])
    page.mouse.down()
    page.mouse.move(box[1], box[2], steps=8)
    page.mouse.up()
    page.wait_for_function("() => document.getElementById('curves').dataset.source === 'raw'")
    zoom = page.evaluate("() => window.studioCurves.zoom")
    assert 990 < zoom["min"] < 1010 and 1190 < zoom["max"] < 1210

    refreshes = int(page.get_attribute("#curves", "data-refreshes") or 0)
    metrics_store.write_points(
        live.pk, "more", [{"key": REWARD_MEAN, "step": s, "value": 0.9, "ts": 2e9} for s in range(3000, 3100)]
    )
    page.wait_for_function(
        f"() => Number(document.getElementById('curves').dataset.refreshes) >= {refreshes + 2}"
    )
    after = page.evaluate(
        f"""() => {{
            const u = window.studioCharts.get('{REWARD_MEAN}');
            return {{min: u.scales.x.min, max: u.scales.x.max, steps: u.data[0]}};
        }}"""
    )
    assert (after["min"], after["max"]) == (zoom["min"], zoom["max"])
    lo, hi = int(zoom["min"]), int(zoom["max"]) + 1
    assert after["steps"] == list(range(lo, hi + 1))  # every step of the range, none from the new points
    assert "lo=" in (page.get_attribute(f"figure[data-key='{REWARD_MEAN}'] a.csv", "href") or "")
