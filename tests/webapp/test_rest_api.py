"""The product from code (docs/api.md): token scopes and expiry, members, streamed dataset uploads,
experiments from defaults, tools and rewards, run logs and checkpoints. Who may call each operation
is the persona matrix's (tests/webapp/test_access_matrix.py); these check what the calls do."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.tools.conftest import UNUSED_TOOL_ADDRESS, allow_tools_at
from webapp.accounts.models import ApiToken, Membership, Role, TokenRevoked
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.models import Checkpoint, LogChunk
from webapp.retention.models import ExperimentRetention
from webapp.tools.models import TeamReward, TeamTool, ToolTrial

pytestmark = pytest.mark.django_db


class Api:
    """The test client with a personal token, speaking JSON."""

    def __init__(self, client: Client, token: str) -> None:
        self.client, self.headers = client, {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def __call__(self, method: str, path: str, body: Any = None, **extra: Any) -> Any:
        url = "/api" + path
        if method == "GET":
            return self.client.get(url, body or {}, **self.headers)
        if method == "UPLOAD":
            return self.client.post(url, body, **self.headers)
        data = json.dumps(body) if body is not None else ""
        return self.client.generic(
            method, url, data, content_type="application/json", **self.headers, **extra
        )


@pytest.fixture
def alice(client: Client, personas: Any) -> Api:
    return Api(client, ApiToken.issue(personas["alice"], "tests")[1])


@pytest.fixture
def dataset(alice: Api, tmp_path: Path) -> dict[str, Any]:
    path = write_parquet(tmp_path / "rows.parquet", [contract_row(i) for i in range(6)])
    with path.open("rb") as handle:
        response = alice("UPLOAD", "/t/acme/datasets", {"file": handle, "name": "six rows"})
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_a_read_only_token_reads_but_changes_nothing_and_an_expired_one_is_dead(
    client: Client, personas: Any
) -> None:
    _row, reader = ApiToken.issue(personas["alice"], "read", scopes=["read"])
    api = Api(client, reader)
    assert api("GET", "/t/acme/runs").status_code == 200
    refused = api("POST", "/t/acme/experiments", {"task": "arithmetic", "dataset": 1})
    assert refused.status_code == 403 and "write scope" in refused.json()["error"]
    assert not Experiment.objects.exists()
    # A read-only token cannot mint a writing one.
    wider = api("POST", "/tokens", {"name": "more", "scopes": ["read", "write"]})
    assert wider.status_code == 403
    _expired, plain = ApiToken.issue(personas["alice"], "old", expires=timezone.now() - timedelta(seconds=1))
    assert Api(client, plain)("GET", "/t/acme/runs").status_code == 401


def test_a_token_issues_a_narrower_token_that_expires_no_later(alice: Api, personas: Any) -> None:
    made = alice("POST", "/tokens", {"name": "ci", "scopes": ["read"], "expires_in_days": 7})
    assert made.status_code == 201, made.content
    body = made.json()
    row = ApiToken.objects.get(pk=body["id"])
    assert row.scopes == ["read"] and row.expires is not None and body["token"].startswith(row.hint)
    assert alice("GET", "/tokens").json()[0]["id"] == row.pk
    assert alice("DELETE", f"/tokens/{row.pk}").status_code == 204
    assert not ApiToken.objects.get(pk=row.pk).is_active


def test_tokens_issued_by_a_token_die_with_it(client: Client, alice: Api, personas: Any) -> None:
    """The finding: a token minted by a token survived its revocation."""
    child = alice("POST", "/tokens", {"name": "ci"}).json()
    grandchild = Api(client, child["token"])("POST", "/tokens", {"name": "ci job"}).json()
    other = ApiToken.issue(personas["alice"], "laptop")[1]  # issued on the page: no parent
    root = ApiToken.objects.get(pk=child["id"]).parent
    assert root is not None and alice("DELETE", f"/tokens/{root.pk}").status_code == 204
    for token in (child["token"], grandchild["token"]):
        assert Api(client, token)("GET", "/t/acme/runs").status_code == 401
    assert Api(client, other)("GET", "/t/acme/runs").status_code == 200
    assert not ApiToken.objects.filter(pk__in=[child["id"], grandchild["id"]], revoked=None).exists()


def test_a_revoked_token_issues_no_child(client: Client, personas: Any) -> None:
    parent, plain = ApiToken.issue(personas["alice"], "parent")
    parent.revoke()
    with pytest.raises(TokenRevoked):
        ApiToken.issue(personas["alice"], "late child", parent=parent)
    assert Api(client, plain)("POST", "/tokens", {"name": "late"}).status_code == 401
    assert ApiToken.objects.count() == 1


def test_owners_manage_members_and_the_last_owner_stays(client: Client, alice: Api, personas: Any) -> None:
    added = alice("POST", "/t/acme/members", {"username": "charlie", "role": "viewer"})
    assert added.status_code == 201 and added.json()["role"] == "viewer"
    charlie = Membership.objects.get(team=personas["acme"], user=personas["charlie"])
    unknown = alice("POST", "/t/acme/members", {"username": "nobody"})
    assert (unknown.status_code, unknown.json()["field"]) == (400, "username")
    assert alice("PATCH", f"/t/acme/members/{charlie.pk}", {"role": "member"}).json()["role"] == "member"
    bob = Api(client, ApiToken.issue(personas["bob"], "b")[1])
    assert bob("PATCH", f"/t/acme/members/{charlie.pk}", {"role": "owner"}).status_code == 403
    own = Membership.objects.get(team=personas["acme"], user=personas["alice"])
    last = alice("PATCH", f"/t/acme/members/{own.pk}", {"role": "viewer"})
    assert last.status_code == 409 and Membership.objects.get(pk=own.pk).role == Role.OWNER
    assert alice("DELETE", f"/t/acme/members/{charlie.pk}").status_code == 204
    assert not Membership.objects.filter(pk=charlie.pk).exists()


def test_an_uploaded_parquet_is_validated_in_the_answer_and_found_by_its_hash(
    alice: Api, dataset: dict[str, Any], tmp_path: Path
) -> None:
    assert dataset["status"] == "valid" and dataset["stats"]["rows"] == 6 and dataset["name"] == "six rows"
    again = write_parquet(tmp_path / "same.parquet", [contract_row(i) for i in range(6)])
    with again.open("rb") as handle:
        repeated = alice("UPLOAD", "/t/acme/datasets", {"file": handle})
    assert repeated.status_code == 200 and repeated.json()["id"] == dataset["id"]
    found = alice("GET", "/t/acme/datasets", {"sha256": dataset["sha256"]}).json()
    assert [d["id"] for d in found["items"]] == [dataset["id"]]
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not a parquet file")
    with broken.open("rb") as handle:
        invalid = alice("UPLOAD", "/t/acme/datasets", {"file": handle}).json()
    assert invalid["status"] == "invalid" and invalid["problems"]
    file = alice("GET", f"/t/acme/datasets/{dataset['id']}/file")
    assert file.status_code == 200 and b"".join(file.streaming_content)[:4] == b"PAR1"
    assert alice("POST", f"/t/acme/datasets/{dataset['id']}/archive", {}).json()["id"] == dataset["id"]
    assert Dataset.objects.get(pk=dataset["id"]).archived
    assert alice("DELETE", f"/t/acme/datasets/{invalid['id']}").status_code == 204


def test_an_experiment_from_preset_task_and_dataset_then_changed_cloned_and_deleted(
    alice: Api, dataset: dict[str, Any]
) -> None:
    retention = {"retention": "sample", "sample_fraction": 0.25}
    made = alice(
        "POST",
        "/t/acme/experiments",
        {"preset": "grpo", "task": "arithmetic", "dataset": dataset["id"], "retention": retention},
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["config"]["model"]["path"] == "smollm2-135m-instruct"
    assert body["config"]["data"]["train_path"] == f"dataset:{dataset['id']}"
    assert body["name"].startswith("arithmetic grpo ")
    pk = body["id"]
    bad = alice("PATCH", f"/t/acme/experiments/{pk}", {"config": {"rollout": {"n": 0}}})
    assert bad.status_code == 400 and bad.json()["field"].startswith("config.rollout.n")
    changed = alice("PATCH", f"/t/acme/experiments/{pk}", {"config": {"rollout.n": 8}, "description": "d"})
    assert changed.status_code == 200, changed.content
    assert changed.json()["config"]["rollout"]["n"] == 8 and changed.json()["description"] == "d"
    clone = alice("POST", f"/t/acme/experiments/{pk}/clone", {"config": {"rollout.n": 16}}).json()
    assert clone["name"] == f"{body['name']} (clone)" and clone["config"]["rollout"]["n"] == 16
    assert Experiment.objects.get(pk=clone["id"]).cloned_from_id == pk
    kept = ExperimentRetention.objects.get(experiment_id=clone["id"])  # the clone keeps the source's policy
    assert (kept.retention, kept.sample_fraction) == ("sample", 0.25)
    experiment = Experiment.objects.get(pk=pk)
    run = Run.objects.create(experiment=experiment, team=experiment.team, status=RunStatus.RUNNING)
    assert alice("PATCH", f"/t/acme/experiments/{pk}", {"config": {"rollout.n": 4}}).status_code == 409
    assert alice("DELETE", f"/t/acme/experiments/{pk}").status_code == 409
    run.finish(RunStatus.FAILED, "x")
    assert alice("DELETE", f"/t/acme/experiments/{pk}").status_code == 204
    assert not Experiment.objects.filter(pk=pk).exists() and not Run.objects.filter(pk=run.pk).exists()


def test_tools_and_rewards_are_created_changed_tried_and_deleted(
    alice: Api, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow_tools_at(settings, monkeypatch, UNUSED_TOOL_ADDRESS)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    made = alice(
        "POST", "/t/acme/tools", {"name": "kv_lookup", "parameters": schema, "url": "http://127.0.0.1:9/x"}
    )
    assert made.status_code == 201, made.content
    pk = made.json()["id"]
    taken = alice(
        "POST", "/t/acme/tools", {"name": "kv_lookup", "parameters": schema, "url": "http://127.0.0.1:9/x"}
    )
    assert (taken.status_code, taken.json()["field"]) == (400, "name")
    changed = alice("PATCH", f"/t/acme/tools/{pk}", {"description": "finds things", "timeout_s": 3})
    assert changed.status_code == 200 and TeamTool.objects.get(pk=pk).timeout_s == 3
    wrong = alice("POST", f"/t/acme/tools/{pk}/try", {"arguments": {"x": 1}})
    assert wrong.status_code == 400 and "schema" in wrong.json()["error"]
    trial = alice("POST", f"/t/acme/tools/{pk}/try", {"arguments": {"q": "x"}}).json()
    assert trial["status"] == "pending" and ToolTrial.objects.get(pk=trial["id"]).tool_id == pk
    assert alice("GET", f"/t/acme/trials/{trial['id']}").json()["arguments"] == {"q": "x"}
    assert alice("DELETE", f"/t/acme/tools/{pk}").status_code == 204
    reward = alice("POST", "/t/acme/rewards", {"name": "has_answer", "rule": "contains"}).json()
    assert alice("PATCH", f"/t/acme/rewards/{reward['id']}", {"rule": "exact"}).json()["rule"] == "exact"
    scored = alice("POST", f"/t/acme/rewards/{reward['id']}/try", {"response": "4", "ground_truth": "4"})
    assert scored.status_code == 202 and ToolTrial.objects.get(pk=scored.json()["id"]).team_reward_id
    assert alice("DELETE", f"/t/acme/rewards/{reward['id']}").status_code == 204
    assert not TeamReward.objects.exists()


def test_a_runs_logs_checkpoints_and_curves_by_either_key_name(alice: Api, personas: Any) -> None:
    from webapp.ingestion import metrics_store

    experiment = Experiment.objects.create(team=personas["acme"], name="e")
    run = Run.objects.create(experiment=experiment, team=experiment.team, status=RunStatus.RUNNING)
    for seq, text in enumerate(["step 1\n", "step 2\n", "step 3\n"]):
        LogChunk.append(run, seq, text)
    Checkpoint.objects.create(run=run, step=2, path="/ckpt/2", size_bytes=10)
    metrics_store.write_points(run.pk, "b1", [{"key": "reward/mean", "step": 1, "value": 0.5, "ts": 1.0}])
    tail = alice("GET", f"/t/acme/runs/{run.pk}/logs").json()
    assert (tail["text"], tail["next_after"], tail["status"]) == ("step 1\nstep 2\nstep 3\n", 2, "running")
    assert alice("GET", f"/t/acme/runs/{run.pk}/logs", {"after": 1}).json()["text"] == "step 3\n"
    assert [c["step"] for c in alice("GET", f"/t/acme/runs/{run.pk}/checkpoints").json()] == [2]
    for name in ("keys", "key"):
        curve = alice("GET", f"/t/acme/runs/{run.pk}/metrics/curve", {name: "reward/mean"}).json()
        assert curve["series"][0]["value"] == [0.5], name
    assert alice("GET", f"/t/acme/runs/{run.pk}/metrics/curve").json()["field"] == "keys"
    stored = alice("GET", f"/t/acme/runs/{run.pk}").json()["storage"]
    assert (stored["retention"], stored["kept"], stored["total_bytes"]) == ("all", 0, 0)
    changed = alice("PATCH", f"/t/acme/runs/{run.pk}/storage", {"retention": "failures", "keep_successes": 3})
    assert changed.status_code == 202 and (changed.json()["keep_successes"], changed.json()["applying"]) == (
        3,
        True,
    )
    assert alice("PATCH", f"/t/acme/runs/{run.pk}/storage", {"sample_fraction": 0}).status_code in (400, 422)
    assert alice("DELETE", f"/t/acme/runs/{run.pk}").status_code == 409
    run.finish(RunStatus.SUCCEEDED)
    assert alice("DELETE", f"/t/acme/runs/{run.pk}").status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists()
