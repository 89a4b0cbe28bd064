from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

from django.apps import apps
from django.db import connection
from django.test import Client

from trainer.config import RunConfig
from webapp.experiments.models import Experiment, Run


def test_the_migration_renames_stored_stepppo_experiments_and_their_runs_pages_still_open(
    client: Client, personas: Any
) -> None:
    migration = importlib.import_module("webapp.experiments.migrations.0005_preset_steppo")
    config = {**RunConfig.from_preset("steppo", name="old").model_dump(mode="json"), "preset": "stepppo"}
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="old", preset="stepppo", config=config)
    run = Run.objects.create(experiment=experiment, team=team, seed=1, config=config)
    grpo = Experiment.objects.create(team=team, name="other", preset="grpo", config={"preset": "grpo"})

    for _ in range(2):  # a second pass changes nothing
        migration.rename_preset(apps, SimpleNamespace(connection=connection))

    experiment.refresh_from_db()
    run.refresh_from_db()
    assert (experiment.preset, experiment.config["preset"], run.config["preset"]) == ("steppo",) * 3
    assert Experiment.objects.get(pk=grpo.pk).config == {"preset": "grpo"}
    client.force_login(personas["alice"])
    for page in (f"/t/acme/experiments/{experiment.pk}/", f"/t/acme/runs/{run.pk}/"):
        response = client.get(page)
        assert response.status_code == 200 and "preset: steppo" in response.content.decode()
