"""Real Chromium: an SFT run and the GRPO run started from its checkpoint, their lineage on both run
pages and in the runs table, the SFT loss curve, and the form's SFT and start-from fields
(docs/sft.md#start-from). Screenshots at 1440 and 1024 px go to var/shots/g29sft/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.experiments.test_evaluations import FILES, saved_checkpoint
from trainer.config import RunConfig
from trainer.contract import REWARD_MEAN, SFT_LOSS, TOOLS_CALL_RATE, VAL_LOSS
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.ingestion import metrics_store

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "g29sft"
WIDTHS = (1440, 1024)


@pytest.fixture
def chain(transactional_db: Any, personas: Any) -> tuple[Run, Run]:
    team = personas["acme"]
    sft_config = RunConfig.from_preset(
        "grpo", **{"task": "lookup", "model.path": "tiny-test", "sft.enabled": True}
    )
    sft_experiment = Experiment.objects.create(team=team, name="lookup sft", task="lookup", preset="grpo")
    sft = Run.objects.create(
        experiment=sft_experiment, team=team, name="lookup sft · seed 1", kind=RunKind.SFT,
        status=RunStatus.SUCCEEDED, step=40, total_steps=40, config=json.loads(sft_config.to_json()),
    )  # fmt: skip
    saved_checkpoint(sft, 40, FILES)
    points = [{"key": SFT_LOSS, "step": s, "value": 2.5 * 0.93**s, "ts": 1.7e9 + s} for s in range(1, 41)]
    points += [
        {"key": VAL_LOSS, "step": s, "value": 2.0 * 0.95**s, "ts": 1.7e9 + s} for s in (10, 20, 30, 40)
    ]
    metrics_store.write_points(sft.pk, "m", points)
    rl_experiment = Experiment.objects.create(team=team, name="lookup grpo", task="lookup", preset="grpo")
    rl = Run.objects.create(
        experiment=rl_experiment, team=team, name="lookup grpo · seed 1", status=RunStatus.RUNNING,
        step=12, total_steps=30, started_from=sft, started_from_step=40, config=json.loads(sft_config.to_json()),
    )  # fmt: skip
    rl_points = [
        {"key": REWARD_MEAN, "step": s, "value": 0.4 + 0.02 * s, "ts": 1.7e9 + s} for s in range(1, 13)
    ]
    rl_points += [
        {"key": TOOLS_CALL_RATE, "step": s, "value": 0.85 + 0.01 * s, "ts": 1.7e9 + s} for s in range(1, 13)
    ]
    metrics_store.write_points(rl.pk, "m", rl_points)
    return sft, rl


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_the_lineage_shows_on_both_run_pages_and_in_the_runs_table(
    signed_in: Callable[[str], Any], live_server: Any, chain: tuple[Run, Run]
) -> None:
    sft, rl = chain
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/{rl.pk}/")
    lineage = page.inner_text("#run-lineage")
    assert "Started from lookup sft · seed 1 · checkpoint step 40" in lineage
    shoot(page, "rl-run-page")
    page.click("#run-lineage a")
    page.wait_for_url(f"**/runs/{sft.pk}/")
    assert "sft" in page.inner_text("h1")
    assert "Runs started from it: lookup grpo · seed 1 (step 40)" in page.inner_text("#run-lineage")
    facts = page.inner_text("#run-facts")
    assert "sft/loss" in facts and "val/loss" in facts and "reward/mean" not in facts  # its losses
    assert page.locator("#health").count() == 0  # no reward: an SFT run is not judged
    shoot(page, "sft-run-page")

    # The lineage column, chosen as a user does in the column chooser (the defaults fit 1,024 px).
    page.goto(f"{live_server.url}/t/acme/runs/?col=name&col=kind&col=status&col=started_from")
    row = page.locator("tr", has_text="lookup grpo · seed 1")
    assert row.locator("a.lineage").inner_text() == f"← run {sft.pk}"
    assert page.locator("tr", has_text="lookup sft · seed 1").locator(".badge.kind-sft").count() == 1
    shoot(page, "runs-table")


def test_the_form_offers_sft_and_a_start_from_checkpoint(
    signed_in: Callable[[str], Any], live_server: Any, chain: tuple[Run, Run]
) -> None:
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/experiments/new/")
    assert page.locator("label", has_text="Supervised fine-tuning (SFT) on demonstrations").count() == 1
    assert page.locator("label", has_text="Start from run").count() == 1
    assert page.locator("label", has_text="Start from checkpoint step").count() == 1
    page.locator("[name='start_from.run']").scroll_into_view_if_needed()
    shoot(page, "form")
