"""A 200 kB one-line prompt on a run's pages: shown clipped, once, not in full four times."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.webapp.trainer_posts import Trainer, trajectory
from webapp.ingestion.models import Trajectory
from webapp.results.templatetags.results import SHOWN_TEXT_MAX


def test_a_200_kb_one_line_prompt_is_clipped_on_the_trajectory_page(
    client: Client, personas: Any, trainer: Trainer, run: Any
) -> None:
    long_prompt = "<|user|>" + "count the sheep " * 12_500  # 200 kB, one line
    step = {"index": 0, "prompt_text": long_prompt, "response_text": "42", "reward": 1.0, "done": True}
    assert (
        trainer.trajectories(1, [{**trajectory("long-s0", "long", 1.0), "steps": [step]}]).status_code == 200
    )
    client.force_login(personas["alice"])
    found = Trajectory.objects.get(uid="long-s0")
    page = client.get(f"/t/acme/runs/{run.pk}/rollouts/{found.pk}/").content.decode()
    assert "count the sheep " * 100 in page  # shown, up to the clip
    assert "count the sheep " * (SHOWN_TEXT_MAX // 16 + 1) not in page
    assert len(page) < 2 * SHOWN_TEXT_MAX + 50_000  # clipped once, not four full copies of 200 kB
