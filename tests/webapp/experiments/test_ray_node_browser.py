"""Real Chromium on where a Ray run runs (docs/ray.md#several-nodes): the run page names its node,
and the sweep page shows each run's node, or what a run still waiting in Ray's queue waits for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.experiments.test_sweeps import tiny_spec
from webapp.experiments import sweeps
from webapp.experiments.executors import WAITING_FOR_RESOURCES
from webapp.experiments.models import Run, RunStatus

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]
SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "cluster"
NODE = "a, 127.0.0.1 · 1a2b3c4d"
WAITING = f"{WAITING_FOR_RESOURCES} 2 CPU"


@pytest.fixture
def placed(transactional_db: Any, personas: Any, arithmetic: Any) -> tuple[Run, Run, int]:
    """A sweep of two Ray runs: the first running on node a, the second waiting for its CPUs."""
    spec = tiny_spec(arithmetic, seeds=[1, 2])
    sweep = sweeps.create_sweep(personas["acme"], personas["alice"], spec)
    first, second = sweep.runs().order_by("pk")
    Run.objects.filter(pk=first.pk).update(executor="ray", status=RunStatus.RUNNING, node=NODE)
    Run.objects.filter(pk=second.pk).update(executor="ray", status=RunStatus.STARTING, message=WAITING)
    return first, second, sweep.pk


def test_the_run_page_names_the_node_and_the_sweep_page_shows_where_each_run_is(
    signed_in: Callable[[str], Any], live_server: Any, placed: tuple[Run, Run, int]
) -> None:
    first, second, sweep = placed
    page = signed_in("bob")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.goto(f"{live_server.url}/t/acme/runs/{first.pk}/")
    assert page.inner_text("#run-node") == NODE
    page.goto(f"{live_server.url}/t/acme/runs/{second.pk}/")
    assert page.locator("#run-node").count() == 0 and page.inner_text("#run-message") == WAITING
    page.goto(f"{live_server.url}/t/acme/sweeps/{sweep}/")
    cells = page.locator(".sweep-cell li").all_inner_texts()
    assert f"on {NODE}" in cells[0] and WAITING in cells[1], cells
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"sweep-nodes-{width}.png"), full_page=True)
        page.goto(f"{live_server.url}/t/acme/runs/{first.pk}/")
        page.screenshot(path=str(SHOTS / f"run-node-{width}.png"), full_page=True)
        page.goto(f"{live_server.url}/t/acme/sweeps/{sweep}/")
