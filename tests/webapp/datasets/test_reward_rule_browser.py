"""verl's own GSM8K file, uploaded in a real browser, is scored by verl's rule by default: the dataset
page and the experiment form say so, the form switches it, and each run trains with the rule its
config carries and says which on its page (docs/rewards.md#verl-and-lenient-rules)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.datasets.test_native_files import verl_gsm8k
from tests.webapp.polling import poll_until
from trainer.config import RunConfig
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.models import Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOTS = Path("var/shots/f30rewards")
WIDTHS = (1440, 1024)


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def fill_experiment(page: Any, url: str, name: str, dataset: Dataset, rule: str | None) -> None:
    """The experiment form with one 1-step tiny-test run; ``rule`` None keeps the form's default."""
    page.goto(f"{url}?task=gsm8k&preset=grpo")
    page.fill("#id_name", name)
    page.select_option("#id_train_dataset", str(dataset.pk))
    page.select_option("#id_model_choice", "tiny-test")
    page.wait_for_load_state("networkidle")  # the model's refill of the advanced fields
    assert page.input_value("[name='data.reward_rule']") == "verl"  # verl's data source: verl's rule
    if rule is not None:
        page.select_option("[name='data.reward_rule']", rule)
    page.click("#advanced summary")
    for path, value in {"trainer.total_steps": "1", "trainer.batch_size": "2", "rollout.n": "2",
                        "rollout.max_new_tokens": "4", "optim.mini_batch_size": "4"}.items():  # fmt: skip
        page.fill(f"[name='{path}']", value)


def test_a_verl_gsm8k_upload_trains_with_verls_rule_by_default_and_a_switched_run_with_the_lenient_one(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, tmp_path: Path,
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("STUDIO_PUBLIC_URL", live_server.url)
    settings.PUBLIC_URL = live_server.url
    start_worker()
    team = personas["acme"]
    page = login("alice")
    page.goto(f"{live_server.url}/t/{team.slug}/datasets/")
    page.set_input_files("#upload-form input[name=file]", str(verl_gsm8k(tmp_path / "gsm8k.parquet")))
    page.fill("#upload-form input[name=name]", "verl gsm8k")
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r"/datasets/\d+/$"))
    page.wait_for_selector("#preview")  # validated by the worker
    row = page.locator(".routing-sources tr[data-source='openai/gsm8k']")
    assert row.locator("[data-reward]").inner_text() == "verl_gsm8k"
    assert row.locator("[data-reward-rule]").get_attribute("data-reward-rule") == "verl"
    assert "lenient" in row.locator("[data-reward-rule]").inner_text()  # and how to switch
    shoot(page, "dataset")
    dataset = Dataset.objects.get(name="verl gsm8k")

    new = f"{live_server.url}/t/{team.slug}/experiments/new/"
    for name, rule in (("verl rule", None), ("lenient rule", "lenient")):
        fill_experiment(page, new, name, dataset, rule)
        if rule is None:
            shoot(page, "form")
        page.click("#experiment-form button[type=submit]:not([name])")
        page.wait_for_url(
            "**/experiments/*/", timeout=60_000
        )  # the create checks the dataset: slow under load
    configs = {e.name: RunConfig.model_validate(e.config) for e in Experiment.objects.filter(team=team)}
    assert {name: c.data.reward_rule for name, c in configs.items()} == {
        "verl rule": "verl",
        "lenient rule": "lenient",
    }

    runs = list(Run.objects.filter(team=team))
    assert len(runs) == 2 and all(run.config["data"]["reward_rule"] for run in runs)
    assert poll_until(lambda: all(r.is_terminal for r in Run.objects.filter(team=team)))
    for run in Run.objects.filter(team=team):
        assert run.status == RunStatus.SUCCEEDED, (run.name, run.message)
        assert Trajectory.objects.filter(run=run).exists()
        page.goto(f"{live_server.url}/t/{team.slug}/runs/{run.pk}/")
        rule = configs[run.experiment.name].data.reward_rule
        assert page.locator("#run-reward-rule strong").inner_text() == rule
        facts = page.locator("#config-summary")
        assert re.search(rf"data\.reward_rule\s+{rule}\b", facts.inner_text()), facts.inner_text()
        shoot(page, f"run-{rule}")
