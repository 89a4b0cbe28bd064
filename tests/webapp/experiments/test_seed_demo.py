from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from trainer.config import RunConfig
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.demo import start_demo
from webapp.experiments.models import Experiment


def test_the_demo_team_has_recipe_datasets_and_a_ready_experiment(db: Any) -> None:
    admin = get_user_model().objects.create_superuser("admin", "", "pw-for-the-demo")
    call_command("seed_demo")
    demo = Team.objects.get(name="Demo")
    names = set(Dataset.usable_for(demo).values_list("name", flat=True))
    assert {"gsm8k train (fixtures)", "hotpotqa train (fixtures)"} <= names
    experiment = Experiment.objects.get(team=demo)
    config = RunConfig.model_validate(experiment.config)
    assert (config.preset, config.task, config.model.path) == ("grpo", "arithmetic", "smollm2-135m-instruct")
    # The demo learns from generated problems, and its validation accuracy is read on 50 of them.
    train, val = (Dataset.resolve(demo, path) for path in (config.data.train_path, config.data.val_path))
    assert train is not None and val is not None
    assert (train.stats["rows"], val.stats["rows"]) == (450, 50)
    assert (train.name, val.name) == (
        "arithmetic train (generated, size 500, seed 0)",
        "arithmetic val (generated, size 500, seed 0)",
    )
    client = Client()
    client.force_login(admin)
    page = client.get(f"/t/{demo.slug}/datasets/").content.decode()
    assert "<td>generated, size 500, seed 0</td>" in page and "<td>fixtures</td>" in page  # preparations
    assert not experiment.runs.exists()  # ready to launch, not launched

    call_command("seed_demo")  # a second `make run` changes nothing
    assert Team.objects.filter(name="Demo").count() == 1
    assert Experiment.objects.filter(team=demo).count() == 1


def test_the_dashboard_demo_learns_from_generated_problems_in_the_users_team(db: Any) -> None:
    user = get_user_model().objects.create_user("ann", "", "pw-for-the-demo")
    team = Team.create_with_owner("Ann's team", user)
    run = start_demo(team, user)
    config = RunConfig.model_validate(run.experiment.config)
    train, val = (Dataset.resolve(team, path) for path in (config.data.train_path, config.data.val_path))
    assert train is not None and val is not None
    assert (train.stats["rows"], val.stats["rows"]) == (450, 50)
