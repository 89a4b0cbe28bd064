"""Real Chromium on the experiment form's checkpoint line (docs/checkpoints.md#sizes): the expected
size of each checkpoint, under the Advanced fields, follows the chosen model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/d35table")


def test_the_form_shows_each_checkpoints_expected_size_for_the_chosen_model(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, arithmetic: Any
) -> None:
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/{personas['acme'].slug}/experiments/new/?task=arithmetic&preset=grpo")
    page.click("#advanced summary")
    line = page.locator("#checkpoint-size")
    assert "about 513.1\xa0MB each (the weights in float32)" in line.inner_text()
    assert page.is_visible("#id_trainer\\.checkpoint_on_cancel") and not page.is_checked(
        "#id_trainer\\.checkpoint_on_cancel"
    )
    assert page.input_value("#id_trainer\\.keep_checkpoints") == "1"
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        line.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"form-checkpoint-size-{width}.png"))
    page.select_option("#id_model_choice", "tiny-test")  # the Advanced section is refilled for it
    page.wait_for_function(
        "() => document.getElementById('checkpoint-size').textContent.includes('12.3\xa0MB each')"
    )
