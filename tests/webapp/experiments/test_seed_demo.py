from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command

from trainer.config import RunConfig
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment


def test_the_demo_team_has_recipe_datasets_and_a_ready_experiment(db: Any) -> None:
    get_user_model().objects.create_superuser("admin", "", "pw-for-the-demo")
    call_command("seed_demo")
    demo = Team.objects.get(name="Demo")
    names = set(Dataset.usable_for(demo).values_list("name", flat=True))
    assert {"arithmetic train (fixtures)", "arithmetic val (fixtures)", "gsm8k train (fixtures)"} <= names
    experiment = Experiment.objects.get(team=demo)
    config = RunConfig.model_validate(experiment.config)
    assert (config.preset, config.task, config.model.path) == ("grpo", "arithmetic", "smollm2-135m-instruct")
    assert Dataset.resolve(demo, config.data.train_path) is not None
    assert not experiment.runs.exists()  # ready to launch, not launched

    call_command("seed_demo")  # a second `make run` changes nothing
    assert Team.objects.filter(name="Demo").count() == 1
    assert Experiment.objects.filter(team=demo).count() == 1
