from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.webapp.trainer_posts import Trainer, points, trajectory
from trainer.config import RunConfig
from trainer.contract import CONFIG_PATH, METRICS_PATH, TRAJECTORIES_PATH
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Experiment, Run, RunStatus


@pytest.fixture
def alice_token(personas: Any) -> str:
    return ApiToken.issue(personas["alice"], "tests")[1]


def api(client: Client, method: str, path: str, token: str | None, body: Any = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if method == "get":
        return client.get(path, **headers)
    return client.post(path, json.dumps(body or {}), content_type="application/json", **headers)


def test_tokens_are_stored_hashed_and_stop_working_when_revoked(client: Client, personas: Any) -> None:
    row, plain = ApiToken.issue(personas["alice"], "laptop")
    assert plain.startswith("sk_") and plain not in row.token_hash and len(row.token_hash) == 64
    assert api(client, "get", "/api/t/acme/runs", plain).status_code == 200
    assert ApiToken.objects.get(pk=row.pk).last_used is not None
    assert row.revoke() and not row.revoke()
    response = api(client, "get", "/api/t/acme/runs", plain)
    assert response.status_code == 401 and response.json() == {
        "error": "a valid Bearer token is required",
        "code": "unauthenticated",
    }


def test_the_token_page_creates_a_token_once_and_revokes_it(client: Client, personas: Any) -> None:
    client.force_login(personas["alice"])
    page = client.post("/account/tokens/", {"name": "notebook"}).content.decode()
    plain = page.split('id="new-token">', 1)[1].split("<", 1)[0]
    token = ApiToken.objects.get(user=personas["alice"])
    assert token.name == "notebook" and plain.startswith(token.hint)
    assert plain not in client.get("/account/tokens/").content.decode()
    client.force_login(personas["charlie"])
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    client.force_login(personas["alice"])
    client.post(f"/account/tokens/{token.pk}/revoke/")
    assert not ApiToken.objects.get(pk=token.pk).is_active


def test_runs_and_experiments_are_listed_a_page_at_a_time(
    client: Client, alice_token: str, experiment: Any
) -> None:
    for seed in range(7):
        Run.objects.create(experiment=experiment, team=experiment.team, seed=seed)
    page = api(client, "get", "/api/t/acme/runs?page=2&page_size=3", alice_token).json()
    assert page["count"] == 7 and page["page"] == 2 and [r["seed"] for r in page["items"]] == [3, 2, 1]
    assert api(client, "get", "/api/t/acme/runs?page_size=9999", alice_token).status_code == 400
    assert api(client, "get", "/api/t/acme/experiments", alice_token).json()["items"][0]["task"] == "gsm8k"


@pytest.fixture
def runnable(personas: Any, tmp_path: Any) -> dict[str, Any]:
    """What every config the API accepts names: a valid dataset of the team and a model."""
    from tests.webapp.experiments.conftest import dataset_from_recipe

    train = dataset_from_recipe(personas["acme"], "arithmetic", tmp_path)["train"]
    return {"data.train_path": train.reference, "model.path": "tiny-test"}


def test_an_experiment_is_created_launched_and_its_run_cancelled(
    client: Client, alice_token: str, runnable: dict[str, Any]
) -> None:
    config = json.loads(
        RunConfig.from_preset("grpo", name="api made", task="arithmetic", **runnable).to_json()
    )
    created = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": config, "seeds": [1, 2]})
    assert created.status_code == 201, created.content
    again = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": config})
    assert again.status_code == 409 and "api made" in again.json()["error"]
    bad = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": {"preset": 5}})
    assert bad.status_code == 400 and bad.json()["error"].startswith("config.preset: preset must be")
    old_name = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": {"preset": "stepppo"}})
    assert (
        old_name.status_code == 400
        and "choose one of: gigpo, grpo, ppo, reinforce, rloo, steppo" in (old_name.json()["error"])
    )
    pk = created.json()["id"]
    launched = api(client, "post", f"/api/t/acme/experiments/{pk}/launch", alice_token)
    assert launched.status_code == 202 and [r["status"] for r in launched.json()] == ["queued", "queued"]
    run_id = launched.json()[0]["id"]
    cancelled = api(client, "post", f"/api/t/acme/runs/{run_id}/cancel", alice_token)
    assert (
        cancelled.json()["status"] == "cancelled" and Run.objects.get(pk=run_id).status == RunStatus.CANCELLED
    )


def test_a_partial_config_gets_the_presets_then_the_recipes_defaults_under_its_own(
    client: Client, alice_token: str, personas: Any, tmp_path: Any
) -> None:
    from tests.webapp.experiments.conftest import dataset_from_recipe

    hotpot = dataset_from_recipe(personas["acme"], "hotpotqa", tmp_path)["train"]  # a dataset that fits
    body = {
        "name": "hotpot ppo",
        "task": "hotpotqa",
        "preset": "ppo",
        "optim.lr": 2e-6,
        "data.train_path": hotpot.reference,
        "model.path": "tiny-test",
    }
    created = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": body})
    assert created.status_code == 201, created.content
    config = RunConfig.model_validate(Experiment.objects.get(pk=created.json()["id"]).config)
    assert (config.algorithm.estimator, config.rollout.n) == ("gae", 1)  # the preset's
    assert (config.algorithm.gamma, config.rollout.tools) == (0.99, ["search"])  # HotpotQA's recipe
    assert config.optim.lr == 2e-6  # the caller's
    verl = {"name": "on verl", "backend": "verl", "resources": {"gpus_per_node": 1}, "optim.mini_batch_size": 8,
            "algorithm.skip_zero_advantage_groups": True}  # fmt: skip
    refused = api(client, "post", "/api/t/acme/experiments", alice_token, {"config": verl})
    assert (
        refused.status_code == 400
        and "set algorithm.skip_zero_advantage_groups to false" in refused.json()["error"]
    )


def test_metrics_and_rollouts_are_queried_over_the_api(
    client: Client, alice_token: str, trainer: Trainer
) -> None:
    trainer.metrics(points(["reward/mean"], range(3000)))
    trainer.trajectories(4, [trajectory(f"a-s{k}", "a", float(k)) for k in range(3)])
    run_id = trainer.run_id
    latest = api(client, "get", f"/api/t/acme/runs/{run_id}/metrics", alice_token).json()
    assert latest == [{"key": "reward/mean", "step": 2999, "value": 2999 * 0.5}]
    curve = api(client, "get", f"/api/t/acme/runs/{run_id}/metrics/curve?key=reward/mean", alice_token).json()
    assert curve["series"][0]["value"][-1] == 2999 * 0.5 and len(curve["series"][0]["step"]) <= 1000
    first = api(
        client, "get", f"/api/t/acme/runs/{run_id}/metrics/points?key=reward/mean&limit=1000", alice_token
    )
    second = api(
        client, "get", f"/api/t/acme/runs/{run_id}/metrics/points?key=reward/mean&after=999", alice_token
    )
    assert first.json()["next_after"] == 999 and second.json()["step"][0] == 1000
    listed = api(client, "get", f"/api/t/acme/runs/{run_id}/trajectories?success=true", alice_token).json()
    assert listed["count"] == 2 and {t["id"] for t in listed["items"]} == {"a-s1", "a-s2"}
    full = api(client, "get", f"/api/t/acme/runs/{run_id}/trajectories/a-s2", alice_token).json()
    assert full["steps"][0]["tool_calls"][0]["result"] == "4" and full["steps"][1]["done"] is True
    tools = api(client, "get", f"/api/t/acme/runs/{run_id}/tools", alice_token).json()
    assert tools[0]["tool"] == "calc" and tools[0]["total"]["calls"] == 3


def test_a_viewer_cannot_launch(client: Client, personas: Any, experiment: Any) -> None:
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import Role

    viewer = get_user_model().objects.create_user("vera", password="x")
    personas["acme"].add_member(viewer, Role.VIEWER)
    token = ApiToken.issue(viewer, "t")[1]
    assert api(client, "get", f"/api/t/acme/experiments/{experiment.pk}", token).status_code == 200
    response = api(client, "post", f"/api/t/acme/experiments/{experiment.pk}/launch", token)
    assert response.status_code == 403 and "member" in response.json()["error"]


def test_the_openapi_schema_describes_every_endpoint(client: Client) -> None:
    schema = client.get("/api/openapi.json").json()
    assert schema["openapi"].startswith("3.")
    for path in (
        METRICS_PATH, TRAJECTORIES_PATH, CONFIG_PATH, "/api/t/{team_slug}/runs/{run_id}/metrics/curve", "/api/t/{team_slug}/experiments/{pk}/launch",
        "/api/t/{team_slug}/runs/{run_id}/cancel", "/api/t/{team_slug}/runs/{run_id}/trajectories",
    ):  # fmt: skip
        assert path in schema["paths"], path
    assert (
        "MetricPoint" in schema["components"]["schemas"]
        and "TrajectoryWire" in schema["components"]["schemas"]
    )
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and b"/static/ninja/swagger-ui-bundle.js" in docs.content


def test_errors_are_json_with_the_right_status(client: Client, alice_token: str) -> None:
    assert api(client, "get", "/api/t/acme/runs/99999", alice_token).json() == {
        "error": "not found",
        "code": "not_found",
    }
    assert api(client, "get", "/api/t/acme/runs/99999", None).status_code == 401
    response = api(client, "get", "/api/t/acme/runs?page=zero", alice_token)
    assert response.status_code == 400 and "page" in response.json()["error"]


def test_the_metric_batch_schema_matches_the_trainers_model() -> None:
    from pydantic import TypeAdapter

    from trainer.contract import MetricPoint
    from webapp.ingestion.metrics_store import MetricPointDict

    ours = TypeAdapter(MetricPointDict).json_schema()
    theirs = MetricPoint.model_json_schema()
    strip = lambda props: {k: {f: v for f, v in p.items() if f != "description"} for k, p in props.items()}  # noqa: E731
    assert strip(ours["properties"]) == strip(theirs["properties"]) and ours["required"] == theirs["required"]
    assert ours.get("additionalProperties") is False and theirs.get("additionalProperties") is False


EXPERIMENT_LEVEL = ["/t/acme/", "/t/acme/dashboard/running/", "/t/acme/compare/", "/t/acme/compare/export.csv",
                    "/t/acme/compare/cell/?task=gsm8k&algorithm=grpo", "/t/acme/curves/"]  # fmt: skip
RUN_LEVEL = ["curves/", "rollouts/", "rollouts/at/0/", "tools/", "prompts/", "groups/g/"]
API_TEAM = ["runs", "experiments", "compare"]
API_RUN = [
    "",
    "/metrics",
    "/metrics/curve?key=r",
    "/metrics/points?key=r",
    "/trajectories",
    "/trajectories/x-s0",
    "/tools",
]


def test_charlie_gets_404_everywhere_and_no_token_gets_401(
    client: Client, personas: Any, trainer: Trainer
) -> None:
    trainer.trajectories(1, [trajectory("x-s0", "g", 1.0)])
    trainer.metrics(points(["r"], range(3)))
    run_id = trainer.run_id
    from webapp.ingestion.models import Trajectory

    pk = Trajectory.objects.get(uid="x-s0").pk
    client.force_login(personas["charlie"])
    pages = [*EXPERIMENT_LEVEL, f"/t/acme/runs/{run_id}/rollouts/{pk}/", f"/t/acme/curves/?run={run_id}",
             f"/t/acme/curves.json?run={run_id}&key=r", f"/t/other/curves.json?run={run_id}&key=r",
             f"/t/other/curves/?run={run_id}", *(f"/t/acme/runs/{run_id}/{p}" for p in RUN_LEVEL),
             *(f"/t/other/runs/{run_id}/{p}" for p in RUN_LEVEL)]  # fmt: skip
    for page in pages:
        assert client.get(page).status_code == 404, page
    charlie = ApiToken.issue(personas["charlie"], "c")[1]
    calls = [*(f"/api/t/acme/{p}" for p in API_TEAM), *(f"/api/t/acme/runs/{run_id}{p}" for p in API_RUN),
             *(f"/api/t/other/runs/{run_id}{p}" for p in API_RUN)]  # fmt: skip
    for path in calls:
        assert api(client, "get", path, charlie).status_code == 404, path
        assert api(client, "get", path, None).status_code == 401, path
    for path in (f"/api/t/acme/runs/{run_id}/cancel", "/api/t/acme/experiments/1/launch"):
        assert api(client, "post", path, charlie).status_code == 404, path
        assert api(client, "post", path, None).status_code == 401, path
    untouched = Run.objects.get(pk=run_id)  # its trainer's claim is the only change it saw
    assert (untouched.status, untouched.cancel_requested) == (RunStatus.RUNNING, False)
    assert Experiment.objects.count() == 1


def test_datasets_and_tools_are_listed_for_members_only(
    client: Client, personas: Any, alice_token: str
) -> None:
    from webapp.datasets.models import Dataset
    from webapp.tools.models import TeamTool

    dataset = Dataset.objects.create(
        team=personas["acme"], name="gsm8k train", sha256="ab" * 32, size_bytes=10
    )
    tool = TeamTool.objects.create(
        team=personas["acme"],
        name="lookup",
        parameters={"type": "object"},
        kind="http",
    )
    listed = api(client, "get", "/api/t/acme/datasets", alice_token).json()
    assert listed["count"] == 1 and listed["items"][0]["name"] == "gsm8k train"
    assert api(client, "get", f"/api/t/acme/tools/{tool.pk}", alice_token).json()["name"] == "lookup"
    assert "secret" not in json.dumps(api(client, "get", "/api/t/acme/tools", alice_token).json()["items"][0])
    charlie = ApiToken.issue(personas["charlie"], "c")[1]
    for path in ("/api/t/acme/datasets", f"/api/t/acme/datasets/{dataset.pk}", "/api/t/acme/tools", f"/api/t/acme/tools/{tool.pk}",
                 f"/api/t/other/datasets/{dataset.pk}", f"/api/t/other/tools/{tool.pk}"):  # fmt: skip
        assert api(client, "get", path, charlie).status_code == 404, path
        assert api(client, "get", path, None).status_code == 401, path
