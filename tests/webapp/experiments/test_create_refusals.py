"""A config that can never run is refused when the experiment is made: 422 with the field path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client

from tests.webapp.experiments.conftest import dataset_from_recipe
from trainer.config import RunConfig
from webapp.accounts.models import ApiToken
from webapp.experiments.forms import ExperimentForm
from webapp.experiments.models import Experiment
from webapp.experiments.views import form_choices
from webapp.tools.models import TeamTool, ToolStatus


@pytest.fixture
def alice_token(personas: Any) -> str:
    return ApiToken.issue(personas["alice"], "tests")[1]


def create(client: Client, token: str, config: dict[str, Any]) -> Any:
    return client.post(
        "/api/t/acme/experiments", json.dumps({"config": config}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


@pytest.fixture
def good(personas: Any, tmp_path: Path) -> dict[str, Any]:
    datasets = dataset_from_recipe(personas["acme"], "arithmetic", tmp_path)
    return {
        "name": "fine",
        "task": "arithmetic",
        "model.path": "tiny-test",
        "data.train_path": datasets["train"].reference,
    }


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (
            {"data.train_path": "dataset:99999"},
            "data.train_path",
            "dataset:99999 is not a valid dataset of this team",
        ),
        ({"data.train_path": "/etc/passwd"}, "data.train_path", "is not a valid dataset"),
        ({"data.val_path": "dataset:99999"}, "data.val_path", "is not a valid dataset"),
        ({"model.path": ""}, "model.path", "no model"),
        (
            {"rollout.tools": ["calculator", "team_ghost"]},
            "rollout.tools",
            "tool 'team_ghost' does not exist",
        ),
        (
            {"rollout.tools": ["pending_tool"]},
            "rollout.tools",
            "'pending_tool' does not exist (or is not ready)",
        ),
        (
            {"rollout.tools": ["moved_tool"]},
            "rollout.tools",
            "'moved_tool' is no longer allowed: tools.example:80/lookup is not allowed",
        ),
        (
            {"data.rewards": {"my_qa": "nobody_reward"}},
            "data.rewards",
            "'nobody_reward', which does not exist",
        ),
    ],
)
def test_the_api_refuses_what_can_never_run_with_422_and_the_field_path(
    client: Client,
    personas: Any,
    alice_token: str,
    good: dict[str, Any],
    change: dict[str, Any],
    path: str,
    words: str,
) -> None:
    TeamTool.objects.create(team=personas["acme"], name="pending_tool", parameters={"type": "object"},
                            kind="python", entry_point="x.y:Z", status=ToolStatus.PENDING)  # fmt: skip
    # Ready once, but its host has since been taken off STUDIO_TOOL_ALLOWLIST (empty in tests).
    TeamTool.objects.create(team=personas["acme"], name="moved_tool", parameters={"type": "object"},
                            kind="http", url="http://tools.example/lookup", status=ToolStatus.READY)  # fmt: skip
    response = create(client, alice_token, {**good, **change})
    assert response.status_code == 422, response.content
    error = response.json()
    assert error["error"].startswith(f"config.{path}: ") and words in error["error"]
    assert (error["code"], error["field"]) == ("invalid", f"config.{path}")
    assert not Experiment.objects.exists()


def test_another_teams_dataset_is_refused_and_a_good_config_is_made(
    client: Client, personas: Any, alice_token: str, good: dict[str, Any], tmp_path: Path
) -> None:
    theirs = dataset_from_recipe(personas["other"], "arithmetic", tmp_path / "other")
    response = create(client, alice_token, {**good, "data.train_path": theirs["train"].reference})
    assert response.status_code == 422 and response.json()["error"].startswith("config.data.train_path: ")
    assert create(client, alice_token, good).status_code == 201


def test_the_apis_defaults_equal_the_forms_for_the_same_preset_and_task(
    client: Client, personas: Any, alice_token: str, good: dict[str, Any]
) -> None:
    team = personas["acme"]
    dataset = good["data.train_path"].removeprefix("dataset:")
    initial = {"name": "fine", "task": "arithmetic", "preset": "rloo", "train_dataset": dataset,
               "model_choice": "tiny-test", "seeds": "42"}  # fmt: skip
    from webapp.experiments.views import _initial

    class Request:
        GET = {"preset": "rloo", "task": "arithmetic"}

    opened = {key: value for key, value in _initial(Request(), None).items() if value is not None}  # type: ignore[arg-type]
    posted = QueryDict(mutable=True)
    for key, value in {**opened, **initial}.items():
        posted.setlist(key, [str(item) for item in value] if isinstance(value, list) else [str(value)])
    form = ExperimentForm(posted, choices=form_choices(team), team=team)
    assert form.is_valid(), form.errors
    from_form = form.build_config()
    assert from_form is not None, form.errors
    response = create(client, alice_token, {**good, "preset": "rloo", "trainer.seed": 42})
    assert response.status_code == 201, response.content
    from_api = RunConfig.model_validate(Experiment.objects.get(pk=response.json()["id"]).config)
    assert from_api.model_dump() == from_form.model_dump()


def test_the_api_stores_the_reward_rule_it_is_given_and_refuses_one_that_does_not_exist(
    client: Client, personas: Any, alice_token: str, good: dict[str, Any]
) -> None:
    response = create(client, alice_token, {**good, "data.reward_rule": "strict"})
    assert response.status_code == 400 and response.json()["field"] == "config.data.reward_rule"
    assert create(client, alice_token, {**good, "name": "default"}).status_code == 201
    assert (
        create(client, alice_token, {**good, "name": "eased", "data.reward_rule": "lenient"}).status_code
        == 201
    )
    stored = {e.name: e.config["data"]["reward_rule"] for e in Experiment.objects.all()}
    assert stored == {"default": "verl", "eased": "lenient"}
