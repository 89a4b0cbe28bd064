"""Real Chromium on the experiment form: another model refills the Advanced section and leaves it
open, keeps the chosen retention policy, and a Save pressed while that refill is on its way saves
what it brings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainer.algos.presets import PRESETS, SMALL_MODEL_LR
from trainer.config import RunConfig
from webapp.experiments.models import Experiment

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]


def test_a_save_pressed_while_the_model_refill_is_on_its_way_saves_that_models_defaults(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, arithmetic: Any
) -> None:
    acme = personas["acme"]
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/{acme.slug}/experiments/new/?task=arithmetic&preset=grpo")
    page.fill("#id_name", "saved at once")
    page.select_option("#id_train_dataset", str(arithmetic["train"].pk))
    page.uncheck("#id_launch")
    page.click("#advanced summary")
    page.select_option("#id_retention", "sample")  # nothing a model changes: each refill keeps it
    page.fill("#id_sample_fraction", "0.25")
    # A local folder not chosen yet: a model of unknown size gets the preset's plain (4B) defaults.
    # The new #advanced listens for the next model change only once htmx has settled it: wait for that,
    # not just for its values (they show ~20 ms earlier, and a change in between sends no refill).
    page.evaluate(
        "() => document.body.addEventListener('htmx:afterSettle', () => "
        "{ window.settledLr = document.querySelector(\"[name='optim.lr']\").value; })"
    )
    page.select_option("#id_model_choice", "path")
    plain_lr = PRESETS.get("grpo").defaults["optim.lr"]
    page.wait_for_function(f"() => Number(window.settledLr) === {plain_lr}")
    assert page.evaluate("() => document.getElementById('advanced').open")  # the refill left it open

    held: list[Any] = []  # the next refill waits until Save has been clicked
    page.route(lambda url: "model_choice=tiny-test" in url, lambda route: held.append(route))
    with page.expect_request(lambda request: "model_choice=tiny-test" in request.url):
        page.select_option("#id_model_choice", "tiny-test")
    while not held:
        page.wait_for_timeout(10)
    page.click("#experiment-form button[type=submit]:not([name])")
    held[0].continue_()
    page.wait_for_url("**/experiments/*/")
    config = RunConfig.model_validate(Experiment.objects.get(team=acme, name="saved at once").config)
    assert (config.model.path, config.optim.lr) == ("tiny-test", SMALL_MODEL_LR)  # not the plain lr
    kept = Experiment.objects.get(team=acme, name="saved at once").retention
    assert (kept.retention, kept.sample_fraction) == ("sample", 0.25)


def test_preview_config_shows_the_config_on_the_first_click(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, arithmetic: Any
) -> None:
    """A new user previews before naming the experiment: that showed nothing, not even why."""
    acme = personas["acme"]
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/{acme.slug}/experiments/new/?task=arithmetic&preset=grpo")
    page.click("button[name=preview]")  # no training dataset chosen yet: it says so
    page.wait_for_selector("#preview-refused")
    assert "Training dataset: This field is required." in page.inner_text("#preview")
    page.select_option("#id_train_dataset", str(arithmetic["train"].pk))
    page.click("button[name=preview]")  # no name yet: the preview does not need one
    page.wait_for_selector("#preview pre.config")
    assert "estimator: grpo" in page.inner_text("#preview pre.config")
    assert page.locator("#preview-refused").count() == 0
    assert not Experiment.objects.filter(team=acme).exists()
