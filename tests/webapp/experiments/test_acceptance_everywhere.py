"""One way to accept a config (docs/architecture.md#how-a-config-is-accepted): the same config sent
through the experiment form, the REST API (which the `studio` CLI calls), a sweep, an evaluation and a
launch is refused with the same field path and the same message by each, only in its own error shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.webapp.experiments.conftest import dataset_from_recipe
from tests.webapp.experiments.test_experiment_form import client_for, form_data
from trainer.config import RunConfig, flatten_paths, nest_paths
from webapp.accounts.models import ApiToken
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run

# The form's fields that stand for a RunConfig path (the rest are named by their path).
FORM_FIELDS = {"train_dataset": "data.train_path", "model_path": "model.path"}
Refusal = tuple[str, str]  # (RunConfig field path, message)

# (what the config changes, what the form changes for the same config, the path refused, words of why)
CASES = {
    "a dataset another task's reward scores": (
        {"task": "gsm8k"},
        {"task": "gsm8k", "val_dataset": ""},
        "data.train_path",
        "rows are scored by the arithmetic reward, not gsm8k's",
    ),
    "a model folder outside the models folder": (
        {"model.path": "/etc"},
        {"model_choice": "path", "model_path": "/etc"},
        "model.path",
        "is outside the models folder",
    ),
    "what the backend refuses": (
        {"resources.nodes": 2},
        {"resources.nodes": "2"},
        "resources.nodes",
        "backend torch runs in one process",
    ),
}


@pytest.fixture
def arithmetic_data(personas: Any, tmp_path: Path) -> dict[str, Dataset]:
    return dataset_from_recipe(personas["acme"], "arithmetic", tmp_path)


@pytest.fixture
def api(personas: Any) -> Callable[[str, dict[str, Any]], Any]:
    token = ApiToken.issue(personas["alice"], "tests")[1]

    def post(path: str, body: dict[str, Any]) -> Any:
        return Client().post(
            f"/api/t/acme{path}",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    return post


def good_fields(datasets: dict[str, Dataset]) -> dict[str, Any]:
    return {
        "name": "arith grpo",
        "task": "arithmetic",
        "model.path": "tiny-test",
        "data.train_path": datasets["train"].reference,
        "data.val_path": None,
    }


def stored_experiment(team: Any, fields: dict[str, Any]) -> Experiment:
    """An experiment whose stored config holds ``fields``, as one made before today's rules, or whose
    dataset changed since, holds them: launching or evaluating it is where they are met."""
    stored = flatten_paths(RunConfig.from_mapping({"name": "stored", "task": "arithmetic"}).model_dump())
    stored.update(fields)
    return Experiment.objects.create(
        team=team, name=stored["name"], task=stored["task"], config=nest_paths(stored)
    )


def from_body(answer: Any, statuses: tuple[int, ...]) -> Refusal:
    """The REST API's refusal, ``{"error": "<field>: <message>", "field": ...}``, as (path, message)."""
    assert answer.status_code in statuses, answer.content
    body = answer.json()
    return body["field"].removeprefix("config."), body["error"].removeprefix(f"{body['field']}: ")


def through_the_form(team: Any, datasets: dict[str, Dataset], changes: dict[str, Any]) -> list[Refusal]:
    answer = client_for("alice").post(f"/t/{team.slug}/experiments/new/", form_data(datasets, **changes))
    assert answer.status_code == 200, answer
    errors = answer.context["form"].errors
    return [
        (FORM_FIELDS.get(field, field), message) for field, messages in errors.items() for message in messages
    ]


def through_the_api(api: Any, fields: dict[str, Any]) -> list[Refusal]:
    return [from_body(api("/experiments", {"config": fields}), (400, 422))]


def through_a_sweep(api: Any, fields: dict[str, Any]) -> list[Refusal]:
    path, message = from_body(api("/sweeps", {"name": "a sweep", "config": fields}), (400, 422))
    assert message.startswith("cell "), message  # the cell it names, then what is wrong with it
    return [(path, message.split(": ", 1)[1])]


def through_an_evaluation(api: Any, team: Any, fields: dict[str, Any]) -> list[Refusal]:
    experiment = stored_experiment(team, fields)
    split = fields["data.train_path"]  # the split the evaluation scores is its one dataset
    path, message = from_body(api("/evaluations", {"experiment": experiment.pk, "dataset": split}), (422,))
    return [("data.train_path" if path == "dataset" else path, message)]


def through_a_launch(api: Any, team: Any, fields: dict[str, Any]) -> list[Refusal]:
    experiment = stored_experiment(team, {**fields, "name": "to launch"})
    return [from_body(api(f"/experiments/{experiment.pk}/launch", {}), (409,))]


@pytest.mark.parametrize("case", CASES)
def test_every_entry_point_refuses_the_same_config_with_the_same_field_and_message(
    personas: Any, arithmetic_data: dict[str, Dataset], api: Any, case: str
) -> None:
    changes, form_changes, path, words = CASES[case]
    team, fields = personas["acme"], {**good_fields(arithmetic_data), **changes}
    refusals = {
        "form": through_the_form(team, arithmetic_data, form_changes),
        "REST API": through_the_api(api, fields),
        "sweep": through_a_sweep(api, fields),
        "evaluation": through_an_evaluation(api, team, fields),
        "launch": through_a_launch(api, team, fields),
    }
    ((refused_path, message),) = refusals["REST API"]
    assert refused_path == path and words in message, message
    assert refusals == {entry: [(path, message)] for entry in refusals}
    assert Experiment.objects.count() == 2  # the evaluated and the launched one, stored before: none made
    assert not Run.objects.exists()


def test_a_config_that_can_run_is_accepted_by_every_entry_point(
    personas: Any, arithmetic_data: dict[str, Dataset], api: Any
) -> None:
    team, fields = personas["acme"], good_fields(arithmetic_data)
    form = client_for("alice").post(
        f"/t/{team.slug}/experiments/new/", form_data(arithmetic_data, val_dataset="")
    )
    assert form.status_code == 302, form.context["form"].errors
    assert api("/experiments", {"config": {**fields, "name": "by the API"}}).status_code == 201
    assert api("/sweeps", {"name": "a sweep", "config": fields}).status_code == 201
    experiment = Experiment.objects.get(name="by the API")
    evaluation = api("/evaluations", {"experiment": experiment.pk, "dataset": fields["data.train_path"]})
    assert evaluation.status_code == 201, evaluation.content
    assert api(f"/experiments/{experiment.pk}/launch", {}).status_code == 202
