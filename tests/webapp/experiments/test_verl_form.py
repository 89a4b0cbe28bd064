"""The experiment form with backend verl: verl's own checks land on our fields."""

from __future__ import annotations

import importlib
import json
from typing import Any

from django.apps import apps as django_apps

from tests.webapp.experiments.test_experiment_form import client_for, form_data
from trainer.config import RunConfig
from webapp.experiments.models import Experiment

VERL = {"backend": "verl", "executor": "ray", "resources.gpus_per_node": "2"}


def post(team: Any, data: dict[str, Any]) -> Any:
    return client_for("alice").post(f"/t/{team.slug}/experiments/new/", data)


def test_a_verl_experiment_that_verl_accepts_is_saved(personas: Any, arithmetic: Any) -> None:
    acme = personas["acme"]
    data = form_data(
        arithmetic, **VERL, **{"trainer.batch_size": "4", "rollout.n": "2", "optim.mini_batch_size": "4"}
    )
    response = post(acme, data)
    assert response.status_code == 302, response.context["form"].errors
    config = RunConfig.model_validate(Experiment.objects.get(team=acme).config)
    assert (config.backend, config.resources.gpus_per_node) == ("verl", 2)


def test_a_batch_that_does_not_split_over_the_gpus_is_a_batch_size_error(
    personas: Any, arithmetic: Any
) -> None:
    acme = personas["acme"]
    data = form_data(
        arithmetic, **VERL, **{"trainer.batch_size": "3", "rollout.n": "3", "optim.mini_batch_size": "3"}
    )
    errors = post(acme, data).context["form"].errors
    assert "multiple of 2" in " ".join(errors["trainer.batch_size"])
    assert not Experiment.objects.filter(team=acme).exists()


def test_what_verl_cannot_express_is_an_error_on_the_field_to_change(personas: Any, arithmetic: Any) -> None:
    # RunConfig accepts 2 trajectories per mini-batch; verl counts mini-batches in whole prompts of
    # rollout.n trajectories each, so the verl backend refuses it (VerlBackend.problems).
    acme = personas["acme"]
    data = form_data(
        arithmetic, **VERL, **{"trainer.batch_size": "4", "rollout.n": "4", "optim.mini_batch_size": "2"}
    )
    errors = post(acme, data).context["form"].errors
    assert "multiple of 4" in " ".join(errors["optim.mini_batch_size"])
    assert not Experiment.objects.filter(team=acme).exists()


def test_stored_configs_are_migrated_to_what_their_backend_did(personas: Any) -> None:
    # Before the backends refused them, verl configs carried skip_zero_advantage_groups = true (the old
    # default) and torch configs could ask for GPUs they never used.
    migration = importlib.import_module("webapp.experiments.migrations.0004_stored_configs_fit_their_backend")
    verl = RunConfig.from_preset(
        "grpo", backend="verl", **{"resources.gpus_per_node": 2, "optim.mini_batch_size": 8}
    )
    stored = {}
    for backend, config in (("verl", verl), ("torch", RunConfig())):
        data = json.loads(config.to_json())
        data["algorithm"]["skip_zero_advantage_groups"] = True
        data["resources"]["gpus_per_node"] = 2
        stored[backend] = Experiment.objects.create(team=personas["acme"], name=backend, config=data)

    migration.fit_their_backend(django_apps, None)

    for experiment in stored.values():
        experiment.refresh_from_db()
    verl_after, torch_after = (RunConfig.model_validate(stored[b].config) for b in ("verl", "torch"))
    assert (verl_after.algorithm.skip_zero_advantage_groups, verl_after.resources.gpus_per_node) == (False, 2)
    assert (torch_after.algorithm.skip_zero_advantage_groups, torch_after.resources.gpus_per_node) == (
        True,
        1,
    )
