"""Real Chromium: the checkpoint registry (filter by tag through htmx, a tag added in place), Fork from
it into the pre-filled form, and the fork's curve continuing its parent's (docs/checkpoints.md).
Screenshots at 1440 and 1024 px go to var/shots/fork/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.experiments.test_evaluations import FILES, saved_checkpoint
from trainer.config import RunConfig
from trainer.contract import EVAL_ACC, REWARD_MEAN
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.ingestion import metrics_store
from webapp.ingestion.models import POLICY_DELETED, Checkpoint

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "fork"
LEFTOVER_SHOTS = SHOTS.parent / "leftovers"
WIDTHS = (1440, 1024)


@pytest.fixture
def lineage(transactional_db: Any, personas: Any) -> tuple[Run, Run]:
    team = personas["acme"]
    config = RunConfig.from_preset(
        "grpo", **{"task": "arithmetic", "model.path": "tiny-test", "name": "arith grpo"}
    )
    experiment = Experiment.objects.create(
        team=team, name="arith grpo", task="arithmetic", preset="grpo", config=json.loads(config.to_json())
    )
    parent = Run.objects.create(
        experiment=experiment, team=team, name="arith grpo · seed 1", status=RunStatus.SUCCEEDED,
        step=30, total_steps=30, config=json.loads(config.to_json()),
    )  # fmt: skip
    for step in (5, 10, 15, 20, 25, 30):
        saved_checkpoint(parent, step, {**FILES, "pad": b"p" * step * 1000})
    Checkpoint.objects.filter(run=parent, step__in=(5, 15, 25)).update(
        deleted=True, deleted_by=f"{POLICY_DELETED} (keep the last 1, every 10 steps)"
    )
    Checkpoint.objects.get(run=parent, step=20).change_tags(add="best")
    evaluation = Run.objects.create(
        experiment=experiment, team=team, name="eval", kind=RunKind.EVALUATION, status=RunStatus.SUCCEEDED,
        evaluated_run=parent, evaluated_step=20, config={"data": {"val_path": "dataset:999"}},
    )  # fmt: skip
    metrics_store.write_points(evaluation.pk, "e", [{"key": EVAL_ACC, "value": 0.62, "step": 0, "ts": 1.0}])
    fork_experiment = Experiment.objects.create(
        team=team, name="arith grpo · half lr", task="arithmetic", preset="grpo"
    )
    child = Run.objects.create(
        experiment=fork_experiment, team=team, name="arith grpo · half lr · seed 1", status=RunStatus.SUCCEEDED,
        step=10, total_steps=10, started_from=parent, started_from_step=20, config=json.loads(config.to_json()),
    )  # fmt: skip
    points = [
        {"key": REWARD_MEAN, "step": s, "value": 0.2 + 0.015 * s, "ts": 1.7e9 + s} for s in range(1, 31)
    ]
    metrics_store.write_points(parent.pk, "m", points)
    child_points = [
        {"key": REWARD_MEAN, "step": s, "value": 0.5 + 0.02 * s, "ts": 1.8e9 + s} for s in range(1, 11)
    ]
    metrics_store.write_points(child.pk, "m", child_points)
    other = Experiment.objects.create(team=personas["other"], name="secret", task="arithmetic", preset="grpo")
    hidden = Run.objects.create(experiment=other, team=personas["other"], name="secret run", config={})
    saved_checkpoint(hidden, 1, FILES)
    return parent, child


def shoot(page: Any, name: str, folder: Path = SHOTS) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=True)


def test_the_registry_filters_tags_and_forks_and_the_fork_continues_its_parents_curve(
    signed_in: Callable[[str], Any], live_server: Any, lineage: tuple[Run, Run]
) -> None:
    parent, child = lineage
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/checkpoints/")
    assert page.locator("#registry-table tbody tr").count() == 6 and "secret run" not in page.content()
    assert "3 deleted" in page.inner_text("#registry-totals") and "by keep-policies" in page.inner_text(
        "#registry-totals"
    )
    shoot(page, "registry")

    page.select_option("select[name=tag]", "best")  # htmx swaps the table and pushes the url
    page.wait_for_url("**tag=best**")
    page.wait_for_function("() => document.querySelectorAll('#registry-table tbody tr').length === 1")
    row = page.locator("#registry-table tbody tr")
    assert "acc 0.62" in row.inner_text()
    row.locator("input[name=add]").fill("candidate")
    row.locator("button", has_text="Add").click()
    page.wait_for_function(
        "() => document.querySelector('#registry-table .checkpoint-tags').innerText.includes('candidate')"
    )
    assert Checkpoint.objects.get(run=parent, step=20).tags == ["best", "candidate"]
    shoot(page, "registry-tagged")

    row.locator("a.fork").click()
    page.wait_for_url(f"**/experiments/new/?fork={parent.pk}&step=20")
    assert "Starting from run" in page.inner_text("#fork-origin")
    assert page.input_value("[name='start_from.step']") == "20"
    page.locator("#fork-origin").scroll_into_view_if_needed()
    shoot(page, "fork-form")

    page.goto(f"{live_server.url}/t/acme/runs/{child.pk}/curves/")
    page.check("#continue-forks")
    page.click("#curve-controls button[type=submit]")
    page.wait_for_url("**lineage=1**")
    page.wait_for_function("() => Number(document.getElementById('curves').dataset.points) >= 30")
    mark = "forked from arith grpo · seed 1 step 20"
    assert page.get_attribute(f"figure[data-key='{REWARD_MEAN}']", "data-marks") == mark
    shoot(page, "fork-curve")

    # With its parent drawn too, the fork's own line starts at step 20, at its mark.
    page.goto(f"{live_server.url}/t/acme/curves/?run={parent.pk}&run={child.pk}&lineage=1")
    page.wait_for_function("() => Number(document.getElementById('curves').dataset.points) >= 40")
    assert page.get_attribute(f"figure[data-key='{REWARD_MEAN}']", "data-marks") == mark
    page.locator(f"figure[data-key='{REWARD_MEAN}']").scroll_into_view_if_needed()
    shoot(page, "fork-beside-parent", LEFTOVER_SHOTS)
