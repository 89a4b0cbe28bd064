"""Real Chromium on the runs table's layout and its URL (docs/runs-and-curves.md#the-runs-table): the
default columns fit a 1,024 px window without sideways scrolling, and the table's whole state (filter,
grouping, sort, columns, page) travels in the URL, so another member opening it sees the same view."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from trainer.contract import ACTOR_KL, REWARD_MEAN, val_key
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import metrics_store
from webapp.results.models import LayoutKind, SavedLayout

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/d35table")
WIDTHS = (1440, 1024)


def _run(experiment: Experiment, seed: int, reward: float) -> Run:
    run = Run.objects.create(
        experiment=experiment,
        team=experiment.team,
        seed=seed,
        name=f"{experiment.name} · seed {seed}",
        status=RunStatus.SUCCEEDED if seed % 2 else RunStatus.RUNNING,
        labels=["baseline", "long-context"] if seed == 1 else [],
        started_at=timezone.now() - timedelta(hours=seed, minutes=7),
        finished_at=timezone.now() if seed % 2 else None,
        step=120 * seed,
        config={"preset": experiment.preset, "algorithm": {"kl_coef": 0.001 * seed}},
    )
    points = [
        {"key": key, "step": step, "value": value + step / 1000, "ts": 1.7e9 + step}
        for step in range(12)
        for key, value in ((REWARD_MEAN, reward), (ACTOR_KL, 0.0123), (val_key("gsm8k"), reward / 2))
    ]
    metrics_store.write_points(run.pk, f"m{run.pk}", points)
    return run


@pytest.fixture
def many_runs(transactional_db: Any, personas: Any) -> list[Run]:
    acme = personas["acme"]
    names = ("gsm8k grpo with tools, long context", "gsm8k ppo baseline with a critic", "hotpotqa rloo")
    runs = []
    for index, name in enumerate(names):
        experiment = Experiment.objects.create(
            team=acme, name=name, task="gsm8k" if index < 2 else "hotpotqa", preset=("grpo", "ppo", "rloo")[index],
            seeds=[1, 2, 3],
        )  # fmt: skip
        runs += [_run(experiment, seed, 0.1 * seed + 0.05 * index) for seed in (1, 2, 3)]
    return runs


def _fits(page: Any) -> dict[str, int]:
    return page.evaluate(
        """() => ({
            document: document.documentElement.scrollWidth - document.documentElement.clientWidth,
            table: document.querySelector('.table-scroll').scrollWidth
                   - document.querySelector('.table-scroll').clientWidth,
        })"""
    )


def test_the_default_runs_table_fits_1024_px_without_sideways_scrolling(
    signed_in: Callable[[str], Any], live_server: Any, many_runs: list[Run]
) -> None:
    page = signed_in("alice")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/t/acme/runs/")
        page.screenshot(path=str(SHOTS / f"runs-table-{width}.png"), full_page=True)
        assert _fits(page) == {"document": 0, "table": 0}, width


def _view(page: Any) -> tuple[list[str], list[str]]:
    headers = [text.strip(" ▲▼") for text in page.locator("#runs thead th").all_inner_texts()]
    rows = [text.split("\t")[0:2] for text in page.locator("#runs tbody tr").all_inner_texts()]
    return headers, [" ".join(cells).strip() for cells in rows]


def test_a_shared_link_shows_another_member_the_same_filter_grouping_sort_and_columns(
    signed_in: Callable[[str], Any], live_server: Any, many_runs: list[Run], personas: Any
) -> None:
    SavedLayout.store(personas["bob"], personas["acme"], None, LayoutKind.RUNS_TABLE, {"columns": ["name"]})
    page = signed_in("alice")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/t/acme/runs/")
    page.click("#column-chooser summary")
    page.select_option("#add-kind", "config")
    page.fill("#add-key", "algorithm.kl_coef")
    page.click("#column-chooser button:has-text('Save columns')")
    page.wait_for_url("**col=config%3Aalgorithm.kl_coef*")
    page.select_option("#fc-1", "preset")
    page.select_option("#fo-1", "ne")
    page.fill("#fv-1", "rloo")
    page.click("#table-query button[type=submit]")
    page.wait_for_url("**fv=rloo*")
    page.click("#runs thead a[data-column='config:algorithm.kl_coef']")
    page.wait_for_url("**sort=config*")
    sorted_view = _view(page)
    assert "algorithm.kl_coef" in sorted_view[0] and len(sorted_view[1]) == 6
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"runs-table-shared-{width}.png"), full_page=True)
    shared = page.url
    assert page.get_attribute("#view-link", "href") == shared.removeprefix(live_server.url)
    page.select_option("#group-by", "task")
    page.click("#table-query button[type=submit]")
    page.wait_for_url("**group=task*")
    grouped_view, grouped = _view(page), page.url

    bob = signed_in("bob")
    bob.goto(shared)
    assert _view(bob) == sorted_view
    bob.goto(grouped)
    assert _view(bob) == grouped_view
    bob.goto(f"{live_server.url}/t/acme/runs/")  # his own view keeps his own columns
    assert _view(bob)[0] == ["Select", "Name"]
