"""Real Chromium: a 4,000-token response coloured by its per-token signals, search, and one prompt
at two training steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.webapp.trainer_posts import trajectory
from trainer.contract import TOKEN_SIGNALS, TokenSignalsWire, TrajectoryBatch
from webapp.ingestion import trajectories

pytestmark = pytest.mark.browser
HOSTILE = "<img src=x onerror=alert(1)>"
TOKENS = 4000


@pytest.fixture
def stored_run(transactional_db: Any, personas: Any) -> Any:
    from webapp.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(team=personas["acme"], name="tokens", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=personas["acme"], seed=1, name="tokens run")
    tokens = [HOSTILE if i == 17 else f" t{i % 50}" for i in range(TOKENS)]
    signals = {name: [((i % 40) - 20) / 10 for i in range(TOKENS)] for name in TOKEN_SIGNALS}
    signals["clipped"] = [float(i % 9 == 0) for i in range(TOKENS)]
    long = trajectory("s1-p0-s0", "s1-p0", 0.0, response="".join(tokens))
    long["steps"][1]["num_response_tokens"] = TOKENS
    long["steps"][1]["token_signals"] = TokenSignalsWire.of(tokens, signals).model_dump()
    later = trajectory("s2-p0-s0", "s2-p0", 1.0, response="the answer is 4, says the zebra")
    for step, body in ((1, long), (2, later)):
        batch = TrajectoryBatch.model_validate({"training_step": step, "trajectories": [body]})
        trajectories.store_batch(run, batch, f"b{step}")
    return run


def test_a_4000_token_response_is_coloured_by_the_chosen_signal_and_search_and_compare_work(
    signed_in: Callable[[str], Any], live_server: Any, stored_run: Any
) -> None:
    from webapp.ingestion.models import Trajectory

    page = signed_in("alice")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    long = Trajectory.objects.get(run=stored_run, uid="s1-p0-s0")
    page.goto(f"{live_server.url}/t/acme/runs/{stored_run.pk}/rollouts/{long.pk}/")
    page.wait_for_selector(".token-view[data-ready='1']", timeout=10_000)
    spans = page.locator(".token-view .token-text span")
    assert spans.count() == TOKENS
    assert spans.nth(17).inner_text() == HOSTILE  # shown as text, never run
    colours = lambda: page.evaluate(  # noqa: E731
        "() => [0, 1, 20, 39].map(i => document.querySelectorAll('.token-text span')[i].style.backgroundColor)"
    )
    advantage = colours()
    assert len(set(advantage)) == 4  # a scale, not one colour
    page.select_option(".token-view select.token-signal", "clipped")
    assert colours() != advantage
    assert "clipped" in page.inner_text(".token-legend")
    spans.nth(9).hover()
    assert page.inner_text(".token-tip") == 'token 9 " t9" · clipped 1.0000'

    page.goto(f"{live_server.url}/t/acme/search/?run={stored_run.pk}")
    page.fill("input[name=q]", "zebra")
    page.click("form.filters button[type=submit]")
    page.wait_for_selector("ol.search-hits li a")
    assert page.inner_text("ol.search-hits mark.hit") == "zebra"
    page.click("ol.search-hits li a")
    page.wait_for_load_state()
    assert "#step-1" in page.url and "Trajectory s2-p0-s0" in page.inner_text("h1")

    page.click("text=this prompt at another step")
    page.wait_for_load_state()
    assert "step 1 against step 2" in page.inner_text("h1")
    assert page.inner_text("#reward-delta") == "+1.000"
    page.select_option("select[name=a]", "2")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state()
    assert "step 2 against step 1" in page.inner_text("h1")  # never a step against itself
    assert dialogs == [] and errors == []
