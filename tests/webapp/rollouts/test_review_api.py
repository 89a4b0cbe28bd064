"""Labelling, queues and Save as dataset through the REST API and the `studio` command line
(docs/annotations.md#rest-and-cli): a member labels, builds a queue and exports it; a viewer reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from django.test import Client

from tests.webapp.trainer_posts import Trainer, trajectory
from trainer.studio.cli import main
from webapp.accounts.models import ApiToken, Role
from webapp.datasets.models import Dataset


def _bearer(user: Any, **kwargs: Any) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user, 'review', **kwargs)[1]}"}


def test_the_rest_api_labels_builds_a_queue_and_saves_it_as_a_dataset(
    client: Client, personas: dict[str, Any], trainer: Trainer, run: Any, django_user_model: Any
) -> None:
    trainer.trajectories(3, [trajectory(f"s3-p{p}-s0", f"s3-p{p}", p / 4) for p in range(4)])
    alice = _bearer(personas["alice"])
    api = f"/api/t/acme/runs/{run.pk}"
    made = client.post(
        f"{api}/queues",
        {"filters": {"step": 3}, "limit": 2, "assignees": ["bob"]},
        content_type="application/json",
        **alice,
    )
    assert made.status_code == 201, made.content
    queue = made.json()
    assert [i["trajectory"] for i in queue["items"]] == ["s3-p0-s0", "s3-p1-s0"] and queue["assignees"] == [
        "bob"
    ]
    labelled = client.post(
        f"{api}/trajectories/s3-p1-s0/annotations",
        {"label": "wrong", "corrected_answer": "5"},
        content_type="application/json",
        **alice,
    )
    assert labelled.json() == {
        "step": None,
        "label": "wrong",
        "author": "alice",
        "note": "",
        "corrected_answer": "5",
    }
    step = client.post(
        f"{api}/trajectories/s3-p1-s0/annotations",
        {"step": 9, "label": "wrong"},
        content_type="application/json",
        **alice,
    )
    assert step.status_code == 400 and step.json()["error"] == "the trajectory has no step 9"
    detail = client.get(f"/api/t/acme/queues/{queue['id']}", **alice).json()
    assert (detail["done"], detail["total"]) == (1, 2) and detail["items"][1]["reviewers"] == {
        "alice": "wrong"
    }
    assert [label["key"] for label in client.get("/api/t/acme/labels", **alice).json()] == list("12345")

    saved = client.post(
        f"/api/t/acme/queues/{queue['id']}/dataset",
        {"name": "api", "corrected_only": True},
        content_type="application/json",
        **alice,
    )
    assert (
        saved.status_code == 201 and saved.json()["status"] == "valid" and saved.json()["stats"]["rows"] == 1
    )

    dave = django_user_model.objects.create_user("dave")
    personas["acme"].add_member(dave, Role.VIEWER)
    viewer = _bearer(dave)
    assert client.get(f"{api}/trajectories/s3-p1-s0/annotations", **viewer).json()[0]["label"] == "wrong"
    refused = client.post(
        f"{api}/trajectories/s3-p1-s0/annotations",
        {"label": "correct"},
        content_type="application/json",
        **viewer,
    )
    assert refused.status_code == 403
    outsider = _bearer(personas["charlie"])
    assert client.get(f"/api/t/acme/queues/{queue['id']}", **outsider).status_code == 404
    assert client.get("/api/t/other/queues", **outsider).json() == []  # Acme's queue is not Other's


@pytest.mark.django_db(transaction=True)
def test_the_studio_cli_labels_queues_and_exports(
    personas: dict[str, Any], live_server: Any, run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    Trainer(Client(), run.pk, str(run.issue_token())).trajectories(
        1, [trajectory(f"s1-p{p}-s0", f"s1-p{p}", p / 2) for p in range(3)]
    )
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    monkeypatch.setenv("STUDIO_URL", live_server.url)
    monkeypatch.setenv("STUDIO_TEAM", "acme")
    monkeypatch.setenv("STUDIO_TOKEN", ApiToken.issue(personas["alice"], "cli")[1])

    def studio(*args: str) -> str:
        result = CliRunner().invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    made = json.loads(
        studio("--json", "queue", str(run.pk), "--filter", "step=1", "--limit", "2", "--assign", "bob")
    )
    assert [i["trajectory"] for i in made["items"]] == ["s1-p0-s0", "s1-p1-s0"]
    assert studio("label", str(run.pk), "s1-p0-s0", "wrong", "--answer", "7") == "s1-p0-s0: wrong\n"
    assert studio("label", str(run.pk), "s1-p1-s0", "correct", "--step", "1") == "s1-p1-s0 step 1: correct\n"
    exported = studio("export", str(made["id"]), "--name", "from cli", "--corrected-only")
    dataset = Dataset.objects.get(name="from cli")
    assert exported.startswith(f"dataset {dataset.pk} 'from cli': valid") and dataset.stats["rows"] == 1
