"""Real Chromium on a dataset page and the New-experiment form (issue 35): the saved reward mapping is
changed in place, a delete asks first, and the form's dataset pickers preselect the task recipe's own
split and say why they list no other dataset. Screenshots at 1440 and 1024 px: var/shots/c35form/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.experiments.test_dataset_pickers import TICKETS_SOURCE, tickets
from webapp.datasets.models import Dataset
from webapp.experiments.demo import import_recipe

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "c35form"
WIDTHS = (1440, 1024)


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_a_mapping_is_changed_in_place_and_a_delete_asks_first(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, tmp_path: Path
) -> None:
    dataset = tickets(personas["acme"], tmp_path)
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/datasets/{dataset.pk}/")
    # Nothing else scores this data source: the select requires a choice (the server refuses none too).
    assert page.locator("#reward-mapping select").get_attribute("required") is not None
    page.select_option("#reward-mapping select", "contains")
    page.click("#reward-mapping button[type=submit]")
    page.wait_for_selector("text=Mapping saved; the dataset is being checked again.")
    dataset.refresh_from_db()
    assert dataset.reward_map == {TICKETS_SOURCE: "contains"}
    dataset.validate()  # what the queued check does (no worker in this test)
    page.goto(f"{live_server.url}/t/acme/datasets/{dataset.pk}/")
    assert page.locator("#reward-mapping select").input_value() == "contains"
    shoot(page, "dataset-page")
    page.click("#dataset-delete")
    page.wait_for_selector("#confirm-delete")
    shoot(page, "dataset-delete-confirm")
    page.click("#confirm-back")
    page.wait_for_selector("#reward-mapping")
    assert Dataset.objects.filter(pk=dataset.pk).exists()
    page.click("#dataset-delete")
    page.click("#confirm-delete")
    page.wait_for_selector("text=Deleted tickets.parquet.")
    assert not Dataset.objects.filter(pk=dataset.pk).exists()


def test_the_form_preselects_the_recipes_split_and_says_why_others_are_hidden(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, tmp_path: Path
) -> None:
    prepared, _ = import_recipe(personas["acme"], "arithmetic", personas["alice"])
    tickets(personas["acme"], tmp_path)  # the newest upload: listed, not chosen
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/experiments/new/")
    assert page.locator("#id_train_dataset").input_value() == str(prepared["train"].pk)
    assert page.locator("#id_val_dataset").input_value() == str(prepared["val"].pk)
    shoot(page, "form-arithmetic")
    page.select_option("#id_task", "gsm8k")
    page.wait_for_selector("#field-train_dataset:has-text('do not fit the task gsm8k')")
    assert page.locator("#id_train_dataset").input_value() == ""
    assert "scored by the arithmetic reward" in page.inner_text("#field-val_dataset")
    page.click("button[name=preview]")
    page.wait_for_selector("#preview-refused")
    shoot(page, "form-gsm8k")
