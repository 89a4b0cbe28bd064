"""Real Chromium on per-prompt learning (docs/rollouts.md#per-prompt-learning): the question, not the
chat template; no verdict of "unstable" from one sample; compare steps sets two different steps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.trainer_posts import trajectory
from trainer.contract import TrajectoryBatch
from webapp.ingestion import trajectories

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/d35table")
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def _chatml(question: str) -> str:
    return (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


@pytest.fixture
def learned_run(transactional_db: Any, personas: Any) -> Any:
    from webapp.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(team=personas["acme"], name="prompts", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=personas["acme"], seed=1, name="prompts run")
    # Row 0 is sampled at steps 1, 2 and 3 and learned at 3; row 1 once, one rollout of four solved.
    rows = {0: ("Natalia sold 48 clips in April. How many in May?", (1, 2, 3)), 1: ("What is 17 x 3?", (1,))}
    for step in (1, 2, 3):
        batch = []
        for row, (question, steps) in rows.items():
            if step not in steps:
                continue
            for k in range(4):
                solved = (row == 0 and step == 3) or (row == 1 and k == 0)
                body = trajectory(f"s{step}-p{row}-s{k}", f"s{step}-p{row}", 1.0 if solved else 0.0)
                body["steps"][0]["prompt_text"] = _chatml(question)
                batch.append(body)
        parsed = TrajectoryBatch.model_validate({"training_step": step, "trajectories": batch})
        trajectories.store_batch(run, parsed, f"b{step}")
    return run


def test_the_prompts_page_shows_questions_and_compares_two_different_steps(
    signed_in: Callable[[str], Any], live_server: Any, learned_run: Any
) -> None:
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{learned_run.pk}/prompts/")
    cells = page.locator("td.prompt-cell").all_inner_texts()
    assert cells == ["Natalia sold 48 clips in April. How many in May?", "What is 17 x 3?"]
    assert "too few samples (1)" in page.inner_text("nav.chips") and "unstable (0)" in page.inner_text(
        "nav.chips"
    )
    assert page.locator("a:has-text('compare steps')").count() == 1  # row 1 has one step only
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"prompts-{width}.png"), full_page=True)
    page.click("a:has-text('compare steps')")
    page.wait_for_url("**/prompts/0/compare/")
    assert "step 1 against step 3" in page.inner_text("h1")
    assert page.inner_text("#question") == "Natalia sold 48 clips in April. How many in May?"
    page.select_option("#id_a", "3")
    page.select_option("#id_b", "3")
    page.click("button:has-text('Compare')")
    page.wait_for_url("**a=3&b=3*")
    assert "step 3 against step 2" in page.inner_text("h1")  # never a step against itself
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"prompt-compare-{width}.png"), full_page=True)
