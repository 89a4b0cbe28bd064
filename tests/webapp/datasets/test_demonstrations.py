"""Generate demonstrations (docs/demonstrations.md): a job that runs each row's tool calls against the
real tools — here a team HTTP tool on loopback, registered through the REST API — and adopts the
verified conversations as a dataset derived from the source, saying what it kept and dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.test import Client

from tasks_lib.demonstrations import TOOL_FAILED
from tests.conftest import PASSWORD
from tests.webapp.datasets.conftest import KeyValueServer, api, lookup_dataset
from tests.webapp.polling import poll_until
from trainer.contract.messages import MESSAGES_KEY, conversation_problems
from webapp.accounts.models import ApiToken
from webapp.datasets.models import Dataset, DatasetStatus
from webapp.experiments.jobs import Job, JobStatus


@pytest.mark.django_db(transaction=True)
def test_a_worker_generates_verified_demonstrations_on_a_team_http_tool_registered_through_the_api(
    personas: dict[str, Any], start_worker: Any, kv_server: KeyValueServer, tmp_path: Path
) -> None:
    token = ApiToken.issue(personas["bob"], "tests")[1]
    client = Client()
    tool = {"name": "team_kv", "description": "Our key-value store.", "url": kv_server.url,
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}  # fmt: skip
    assert api(client, "post", "/api/t/acme/tools", token, tool).status_code == 201
    source = lookup_dataset(personas["acme"], tmp_path)
    rows = source.stats["rows"]

    answer = api(
        client,
        "post",
        f"/api/t/acme/datasets/{source.pk}/demonstrations",
        token,
        {"tools": {"lookup": "team_kv"}},
    )
    assert answer.status_code == 202, answer.content
    assert answer.json()["status"] == "queued" and kv_server.keys == []
    start_worker()

    def finished() -> dict[str, Any] | None:
        state: dict[str, Any] = api(
            client, "get", f"/api/t/acme/demonstrations/{answer.json()['id']}", token
        ).json()
        return state if state["status"] in ("done", "failed") else None

    done = poll_until(finished)
    assert done["status"] == "done", done
    assert (done["result"]["kept"], done["result"]["dropped"]) == (rows - 1, {TOOL_FAILED: 1})
    assert "team_kv" in done["result"]["examples"][TOOL_FAILED]
    assert len(kv_server.keys) == rows and "no-such-key" in kv_server.keys
    made = Dataset.objects.get(pk=done["result"]["dataset"])
    assert (made.status, made.derived_from, made.stats["rows"]) == (DatasetStatus.VALID, source, rows - 1)
    for conversation in pq.read_table(made.path).column(MESSAGES_KEY).to_pylist():
        assert conversation_problems(conversation) == []
        assert '"name": "team_kv"' in conversation[2]["content"]
        assert conversation[-1]["content"] == f"Answer: {conversation[3]['content']}"

    client.login(username="bob", password=PASSWORD)
    page = client.get(f"/t/acme/datasets/{made.pk}/").content.decode()
    assert 'id="derived-from"' in page and source.name in page
    job_page = client.get(f"/t/acme/demonstrations/{done['id']}/").content.decode()
    assert f"Kept <strong>{rows - 1}</strong>" in job_page and TOOL_FAILED in job_page


@pytest.mark.django_db
def test_the_request_refuses_a_tool_the_team_lacks_and_outsiders_see_nothing(
    personas: dict[str, Any], tmp_path: Path
) -> None:
    source = lookup_dataset(personas["acme"], tmp_path)
    client = Client()
    bob = ApiToken.issue(personas["bob"], "tests")[1]
    charlie = ApiToken.issue(personas["charlie"], "tests")[1]
    path = f"/api/t/acme/datasets/{source.pk}/demonstrations"

    refused = api(client, "post", path, bob, {"tools": {"lookup": "nobody_has_this"}})
    assert (
        refused.status_code == 400
        and "'nobody_has_this' is neither a built-in tool" in refused.json()["error"]
    )
    assert api(client, "post", path, bob, {"tools": {"search": "echo"}}).status_code == 400
    assert api(client, "post", path, charlie, {}).status_code == 404
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_dataset_page_offers_the_button_and_the_form_queues_the_job(
    personas: dict[str, Any], tmp_path: Path
) -> None:
    source = lookup_dataset(personas["acme"], tmp_path)
    client = Client()
    client.login(username="bob", password=PASSWORD)
    page = client.get(f"/t/acme/datasets/{source.pk}/").content.decode()
    assert "Generate demonstrations" in page and 'name="tool_lookup"' in page

    answer = client.post(f"/t/acme/datasets/{source.pk}/demonstrations/", {"tool_lookup": "lookup"})
    job = Job.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/t/acme/demonstrations/{job.pk}/"
    assert (job.status, job.options["tool_map"]) == (JobStatus.QUEUED, {})
