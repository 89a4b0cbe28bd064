"""In a real browser: Generate demonstrations on a lookup dataset, a real worker running the lookup
service's calls, then the new dataset; and a run's curves with the tool-use rates beside the reward.
Screenshots at 1440 and 1024 px go to var/shots/h29tools/ (looked at by hand)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.datasets.test_demonstrations import lookup_dataset
from trainer.contract import REWARD_MEAN, TOOLS_CALL_RATE, TOOLS_SUCCESS_RATE, TOOLS_WELL_FORMED_RATE
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import metrics_store

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "h29tools"
WIDTHS = (1440, 1024)


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


@pytest.mark.slow
def test_bob_generates_demonstrations_from_the_dataset_page_and_opens_the_new_dataset(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, tmp_path: Path
) -> None:
    source = lookup_dataset(personas["acme"], tmp_path)
    start_worker()
    page = login("bob")
    page.goto(f"{live_server.url}/t/acme/datasets/{source.pk}/")
    assert page.locator("#demo-tool-lookup option").first.inner_text() == "lookup (the recipe's)"
    shoot(page, "dataset-demonstrations-form")

    page.click("text=Generate demonstrations")
    page.wait_for_url(re.compile(r"/demonstrations/\d+/$"))
    page.wait_for_selector("#demonstrations-done")
    rows = source.stats["rows"]
    assert page.locator("#demonstrations-done").inner_text().startswith(f"Kept {rows - 1} verified")
    assert "a tool call failed" in page.locator("#demonstrations-dropped").inner_text()
    shoot(page, "demonstrations-job")

    page.click("#demonstrations-done a")
    made = Dataset.objects.get(derived_from=source)
    page.wait_for_url(re.compile(rf"/datasets/{made.pk}/$"))
    assert page.locator("#derived-from").inner_text() == source.name


@pytest.mark.slow
def test_the_runs_curves_show_the_tool_use_rates_beside_the_reward(
    personas: dict[str, Any], signed_in: Any, live_server: Any
) -> None:
    acme = personas["acme"]
    experiment = Experiment.objects.create(
        team=acme, name="lookup grpo", task="lookup", preset="grpo", seeds=[1]
    )
    run = Run.objects.create(experiment=experiment, team=acme, seed=1, name="lookup grpo seed 1",
                             status=RunStatus.SUCCEEDED, config={"rollout": {"tools": ["lookup"]}})  # fmt: skip
    curves = {
        REWARD_MEAN: lambda s: 0.05 + 0.03 * s,
        TOOLS_CALL_RATE: lambda s: min(1.0, 0.3 + 0.05 * s),
        TOOLS_WELL_FORMED_RATE: lambda s: min(1.0, 0.5 + 0.04 * s),
        TOOLS_SUCCESS_RATE: lambda s: min(1.0, 0.4 + 0.04 * s),
    }
    points = [{"key": key, "step": s, "value": value(s), "ts": 1.7e9 + s} for s in range(1, 21) for key, value in curves.items()]  # fmt: skip
    metrics_store.write_points(run.pk, "m", points)
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/{run.pk}/curves/?smoothing=0")
    page.wait_for_function(f"() => window.studioCharts && window.studioCharts.get('{TOOLS_SUCCESS_RATE}')")
    panels = page.locator("#curves figure.panel").evaluate_all("(nodes) => nodes.map((n) => n.dataset.key)")
    assert panels[:4] == [REWARD_MEAN, TOOLS_CALL_RATE, TOOLS_WELL_FORMED_RATE, TOOLS_SUCCESS_RATE]
    drawn = page.evaluate(f"() => window.studioCharts.get('{TOOLS_CALL_RATE}').data[1].length")
    assert drawn == 20
    shoot(page, "run-tool-use-curves")
