"""Real Chromium against the live test server: live curves, click-through, and escaping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.webapp.trainer_posts import trajectory
from trainer.contract import TrajectoryBatch
from webapp.ingestion import metrics_store, trajectories

pytestmark = pytest.mark.browser


def _points(steps: range) -> list[dict[str, Any]]:
    return [{"key": "reward/mean", "step": s, "value": (s % 7) / 7, "ts": 1.7e9 + s} for s in steps]


@pytest.fixture
def live_run(transactional_db: Any, personas: Any) -> Any:
    from webapp.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(team=personas["acme"], name="live", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=personas["acme"], seed=1, name="live run")
    run.enqueue()
    run.claim("test", "test")
    return run


def test_the_curve_page_of_a_live_run_gains_points_without_a_reload(
    login: Callable[[str], Any], live_server: Any, live_run: Any
) -> None:
    metrics_store.forget_cached_keys()
    metrics_store.write_points(live_run.pk, "first", _points(range(0, 20)))
    page = login("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{live_run.pk}/curves/")
    page.wait_for_function("() => Number(document.getElementById('curves').dataset.points) >= 20")
    page.evaluate("() => { window.__sameDocument = true; }")
    metrics_store.write_points(live_run.pk, "second", _points(range(20, 60)))
    page.wait_for_function(
        "() => Number(document.getElementById('curves').dataset.points) >= 60", timeout=20_000
    )
    assert page.evaluate("() => window.__sameDocument") is True
    assert "Live" in page.inner_text("#curves-status")


def test_clicking_a_curve_point_opens_that_steps_rollouts(
    login: Callable[[str], Any], live_server: Any, live_run: Any
) -> None:
    metrics_store.forget_cached_keys()
    metrics_store.write_points(live_run.pk, "m", _points(range(0, 12)))
    batch = TrajectoryBatch.model_validate(
        {"training_step": 5, "trajectories": [trajectory(f"s5-p0-s{k}", "s5-p0", 1.0) for k in range(2)]}
    )
    trajectories.store_batch(live_run, batch, "t")
    live_run.finish("succeeded")  # not live: the chart stays still under the mouse
    page = login("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{live_run.pk}/curves/")
    page.wait_for_function("() => window.studioCharts && window.studioCharts.get('reward/mean')")
    x, y = page.evaluate(
        """() => {
            const u = window.studioCharts.get('reward/mean');
            const i = u.data[0].indexOf(5);
            const box = u.over.getBoundingClientRect();
            return [box.left + u.valToPos(5, 'x'), box.top + u.valToPos(u.data[1][i], 'y')];
        }"""
    )
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    page.wait_for_url("**/rollouts/?step=5")
    assert "s5-p0-s1" in page.inner_text("#rollout-table")


PAYLOADS = [
    "<script>window.__xss = 'script'; alert(1)</script>",
    "<img src=x onerror=\"window.__xss = 'img'; alert(2)\">",
    "<svg onload=\"window.__xss = 'svg'\">",
]


def test_model_and_tool_text_never_runs_in_the_browser(
    login: Callable[[str], Any], live_server: Any, live_run: Any
) -> None:
    evil = " ".join(PAYLOADS)
    wire = trajectory("evil-s0", "evil", 1.0, response=evil + " <tool_call>" + evil + "</tool_call>")
    wire["steps"][0]["prompt_text"] = evil
    wire["steps"][0]["tool_calls"][0]["result"] = evil
    wire["steps"][0]["tool_calls"][0]["name"] = PAYLOADS[1]
    wire["data_source"] = PAYLOADS[2][:90]
    trajectories.store_batch(
        live_run, TrajectoryBatch.model_validate({"training_step": 1, "trajectories": [wire]}), "x"
    )
    found = live_run.trajectories.get()
    page = login("alice")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    base = f"{live_server.url}/t/acme/runs/{live_run.pk}"
    for path in (f"/rollouts/{found.pk}/", "/groups/evil/", "/rollouts/", "/tools/", "/prompts/"):
        page.goto(base + path)
        page.wait_for_load_state("load")
        page.evaluate("() => document.querySelectorAll('details').forEach((d) => d.open = true)")
        assert page.evaluate("() => window.__xss") is None, path
        assert page.locator("script:not([src])").count() == 0, path
    page.goto(f"{base}/rollouts/{found.pk}/")
    assert PAYLOADS[0] in page.inner_text("#step-1 pre.response")
    assert page.locator("#step-1 mark.toolcall").count() == 1
    assert dialogs == []
