from __future__ import annotations

from typing import Any

from django.test import Client

from trainer.config import RunConfig
from webapp.experiments.models import Experiment, Run, RunStatus


def test_the_run_and_experiment_pages_poll_their_fragment_until_the_run_ends(
    client: Client, personas: Any
) -> None:
    config = RunConfig.from_preset("grpo", name="polled").model_dump(mode="json")
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="polled", preset="grpo", config=config)
    run = Run.objects.create(experiment=experiment, team=team, seed=1, config=config, status=RunStatus.QUEUED)
    client.force_login(personas["alice"])
    # page -> (the element its poll swaps, how that fragment opens)
    pages = {
        f"/t/acme/runs/{run.pk}/": ("live", '<section id="live"'),
        f"/t/acme/experiments/{experiment.pk}/": ("runs-table", '<div id="runs-table"'),
    }

    def poll(page: str, target: str) -> Any:
        return client.get(page, headers={"HX-Request": "true", "HX-Target": target})

    for page, (target, opening) in pages.items():
        polled = poll(page, target)
        assert polled.status_code == 200 and polled.content.decode().lstrip().startswith(opening)
        assert "<html" in client.get(page).content.decode()  # without htmx: the whole page
    assert run.claim("w1", "claimant-1") and run.finish(RunStatus.SUCCEEDED)
    for page, (target, _) in pages.items():
        ended = poll(page, target)
        assert ended.status_code == 286 and "succeeded" in ended.content.decode()
