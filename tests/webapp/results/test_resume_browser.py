"""Real Chromium on resuming a run (docs/resume.md): the run page's Resume… asks first and names the
checkpoint step, the resumed run lists its attempts, and its curve marks the resume. Screenshots at
1440 and 1024 px go to var/shots/resume/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.backends.checkpoint_folders import torch_checkpoint
from tests.webapp.results.test_resume import make_run
from trainer.contract import REWARD_MEAN
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion import metrics_store

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/resume")


@pytest.fixture
def failed(transactional_db: Any, personas: Any) -> Run:
    """A run that stored 12 steps, checkpointed step 8 and was killed."""
    run = make_run(personas)
    points = [{"key": REWARD_MEAN, "step": s, "value": 0.1 + 0.05 * s, "ts": 1.7e9 + s} for s in range(1, 13)]
    metrics_store.write_points(run.pk, "m", points)
    torch_checkpoint(Path(checkpoint_dir(run)), 8, resumable=True)
    Run.objects.filter(pk=run.pk).update(name="killed at 12", step=12, total_steps=20)
    run.refresh_from_db()
    assert run.enqueue()
    assert run.finish(RunStatus.FAILED, "the trainer exited with code 137 (killed)")
    return run


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_resume_asks_first_continues_from_the_checkpoint_and_the_run_lists_its_attempts(
    signed_in: Callable[[str], Any], live_server: Any, failed: Run
) -> None:
    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/runs/{failed.pk}/")
    page.click("#resume-run")
    assert page.inner_text("#resume-step") == "step 8"
    shoot(page, "confirm")
    page.click("#confirm-resume")
    page.wait_for_url(f"**/runs/{failed.pk}/")
    assert "Resumed as attempt 2" in page.inner_text("body")
    assert page.inner_text("#run-status").startswith("queued")
    assert page.locator("#resume-run").count() == 0  # queued again: nothing to resume
    rows = page.locator("#run-attempts tbody tr").all_inner_texts()
    assert len(rows) == 2 and "the start" in rows[0] and "failed" in rows[0] and "code 137" in rows[0]
    assert "checkpoint step 8" in rows[1] and "still going" in rows[1]
    page.locator("#run-attempts").scroll_into_view_if_needed()
    shoot(page, "attempts")

    # The new attempt reports steps 9 to 12 again: one line, marked at step 8.
    again = [{"key": REWARD_MEAN, "step": s, "value": 0.6 - 0.02 * s, "ts": 1.8e9 + s} for s in range(9, 13)]
    metrics_store.write_points(failed.pk, "again", again)
    page.goto(f"{live_server.url}/t/acme/runs/{failed.pk}/curves/")
    page.wait_for_selector("figure.panel canvas")
    shoot(page, "curve")
