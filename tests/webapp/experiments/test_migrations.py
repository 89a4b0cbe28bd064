from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from trainer.config import RunConfig
from webapp.experiments.models import Experiment, LoggedValue, Run


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


ONE_TABLE = ("experiments", "0012_one_table_for_params_and_tags")
BEFORE_ONE_TABLE = ("experiments", "0011_run_cancel_reason")


@pytest.mark.django_db(transaction=True)
def test_the_migration_to_one_table_keeps_every_param_and_tag_and_going_back_splits_them_again(
    personas: Any,
) -> None:
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate([BEFORE_ONE_TABLE])
        old = executor.loader.project_state([BEFORE_ONE_TABLE]).apps
        # The models as they were then: today's Run has columns that schema does not.
        experiment = old.get_model("experiments", "Experiment").objects.create(
            team_id=personas["acme"].pk, name="logged", external=True
        )
        run = old.get_model("experiments", "Run").objects.create(
            experiment_id=experiment.pk, team_id=personas["acme"].pk, executor="external"
        )
        # The same key as a param and as a tag: two rows, which the new table must keep apart.
        old.get_model("experiments", "RunParam").objects.create(run_id=run.pk, key="lr", value="0.1")
        old.get_model("experiments", "RunTag").objects.create(run_id=run.pk, key="lr", value="tagged")
        old.get_model("experiments", "RunTag").objects.create(run_id=run.pk, key="mlflow.user", value="bob")

        _migrate(executor, ONE_TABLE)
        logged = LoggedValue.objects.filter(run_id=run.pk)
        assert dict(logged.params().values_list("key", "value")) == {"lr": "0.1"}
        assert dict(logged.tags().values_list("key", "value")) == {"lr": "tagged", "mlflow.user": "bob"}

        _migrate(executor, BEFORE_ONE_TABLE)
        old = executor.loader.project_state([BEFORE_ONE_TABLE]).apps
        params = old.get_model("experiments", "RunParam").objects.filter(run_id=run.pk)
        tags = old.get_model("experiments", "RunTag").objects.filter(run_id=run.pk)
        assert dict(params.values_list("key", "value")) == {"lr": "0.1"}
        assert dict(tags.values_list("key", "value")) == {"lr": "tagged", "mlflow.user": "bob"}
    finally:
        _migrate(MigrationExecutor(connection), *leaves)


def _migrate(executor: MigrationExecutor, *targets: tuple[str, str]) -> None:
    executor.loader.build_graph()  # reread what is applied: the loader read it when the executor was made
    executor.migrate(list(targets))


def test_configs_stored_before_the_reward_rule_keep_the_lenient_rule_and_their_run_page_says_so(
    client: Client, personas: Any
) -> None:
    migration = importlib.import_module("webapp.experiments.migrations.0014_reward_rule_of_stored_configs")
    config = RunConfig.from_preset("grpo", name="old").model_dump(mode="json")
    del config["data"]["reward_rule"]
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="old", preset="grpo", config=config)
    run = Run.objects.create(experiment=experiment, team=team, seed=1, config=config)
    new = RunConfig.from_preset("grpo", name="new").model_dump(mode="json")
    recent = Experiment.objects.create(team=team, name="new", preset="grpo", config=new)

    for _ in range(2):  # a second pass changes nothing
        migration.keep_the_lenient_rule(apps, SimpleNamespace(connection=connection))

    experiment.refresh_from_db()
    run.refresh_from_db()
    assert experiment.config["data"]["reward_rule"] == run.config["data"]["reward_rule"] == "lenient"
    assert Experiment.objects.get(pk=recent.pk).config["data"]["reward_rule"] == "verl"
    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "<dt><code>data.reward_rule</code></dt><dd>lenient</dd>" in page
