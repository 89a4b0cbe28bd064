from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from tasks_lib.lookup.warm_start import RL_SETTINGS, SFT_SETTINGS
from tests.webapp.experiments.test_evaluations import FILES, saved_checkpoint
from trainer.config import RunConfig, flatten_paths
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.demo import DEMONSTRATED_ROWS, RL_DEMO_NAME, start_demo
from webapp.experiments.models import Experiment, RunKind, RunStatus


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


def test_the_dashboard_demo_fine_tunes_on_lookup_demonstrations_then_starts_grpo_from_its_checkpoint(
    db: Any, django_capture_on_commit_callbacks: Any
) -> None:
    user = get_user_model().objects.create_user("ann", "", "pw-for-the-demo")
    team = Team.create_with_owner("Ann's team", user)
    sft = start_demo(team, user)
    config = RunConfig.model_validate(sft.experiment.config)
    assert (sft.kind, config.task, config.sft.enabled) == (RunKind.SFT, "lookup", True)
    # The short format warm start and the GRPO the bench measures (docs/sft.md#the-demos-numbers).
    assert SFT_SETTINGS.items() <= flatten_paths(config.model_dump()).items()
    demos = Dataset.resolve(team, config.data.train_path)
    assert demos is not None and demos.holds_demonstrations and demos.stats["rows"] == DEMONSTRATED_ROWS
    assert not Experiment.objects.filter(team=team, name=RL_DEMO_NAME).exists()  # not before the SFT ends

    saved_checkpoint(sft, 40, FILES)
    with django_capture_on_commit_callbacks(execute=True):
        assert sft.finish(RunStatus.SUCCEEDED)
    rl = Experiment.objects.get(team=team, name=RL_DEMO_NAME)
    (run,) = rl.runs.all()
    rl_config = RunConfig.model_validate(run.config)
    assert (run.kind, run.started_from, run.started_from_step) == (RunKind.TRAINING, sft, 40)
    assert (rl_config.task, rl_config.sft.enabled, rl_config.trainer.total_steps) == ("lookup", False, 30)
    assert RL_SETTINGS.items() <= flatten_paths(rl_config.model_dump()).items()
    train, val = (
        Dataset.resolve(team, path) for path in (rl_config.data.train_path, rl_config.data.val_path)
    )
    assert train is not None and val is not None and (train.stats["rows"], val.stats["rows"]) == (450, 50)
