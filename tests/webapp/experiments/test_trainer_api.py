"""The trainer's lifecycle calls: one claim owns the run; nothing else claims or changes it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.webapp.trainer_posts import Trainer, points
from trainer.contract import CLAIM_PATH, CONFIG_PATH, HEARTBEAT_PATH, STATUS_PATH
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.models import MetricPoint


@pytest.fixture
def run(personas: Any) -> Run:
    experiment = Experiment.objects.create(team=personas["acme"], name="gsm8k grpo", task="gsm8k")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={"name": "r1"})
    run.enqueue()
    return run


@pytest.fixture
def trainer(client: Client, run: Run) -> Trainer:
    return Trainer(client, run.pk, run.issue_token(), claim=False)


def claim(trainer: Trainer, worker: str = "host:1") -> Any:
    return trainer.post(CLAIM_PATH, {"worker": worker, "claimant": trainer.claimant}, compress=False)


def test_the_run_is_claimed_once_and_a_repeat_or_running_report_claims_nothing(
    trainer: Trainer, run: Run
) -> None:
    assert claim(trainer).json() == {"status": "running", "claimed_by": "host:1"}
    run.refresh_from_db()
    started = run.started_at
    # The same process retrying its claim (its first answer lost) is told yes; nothing moves.
    assert claim(trainer).status_code == 200
    running = trainer.post(STATUS_PATH, {"status": "running", "message": "training"})
    assert running.status_code == 200 and running.json()["status"] == "running"
    run.refresh_from_db()
    assert (run.claimed_by, run.started_at, run.message) == ("host:1", started, "training")
    trainer.claimant = "another-start"
    other = claim(trainer, "host:2")
    assert other.status_code == 409 and "owner: host:1" in other.json()["error"]
    run.refresh_from_db()
    assert (run.claimed_by, run.started_at) == ("host:1", started)


def test_running_or_a_claim_without_a_worker_is_refused_and_claims_nothing(
    trainer: Trainer, run: Run
) -> None:
    response = trainer.post(STATUS_PATH, {"status": "running", "message": "hi"})
    assert response.status_code == 409 and "claimed" in response.json()["error"]
    assert trainer.post(CLAIM_PATH, {"worker": "", "claimant": trainer.claimant}).status_code == 400
    assert trainer.post(CLAIM_PATH, {"worker": "host:1"}).status_code == 400  # no claimant id
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.message) == (RunStatus.QUEUED, "", "")


def test_a_process_refused_at_claim_cannot_fail_or_feed_the_run_its_claimant_trains(
    client: Client, trainer: Trainer, run: Run
) -> None:
    assert claim(trainer).status_code == 200
    assert trainer.post(HEARTBEAT_PATH, {"step": 3, "total_steps": 10, "ts": 1.0}).status_code == 200
    # A second process of the run (a retried launch) has the same token but another claimant id.
    second = Trainer(client, run.pk, trainer.token, claim=False)
    second.claimant = "second-start"
    assert claim(second, "host:2").status_code == 409
    refused = [
        second.post(STATUS_PATH, {"status": "failed", "message": "could not claim"}),
        second.post(HEARTBEAT_PATH, {"step": 9, "total_steps": 10, "ts": 2.0}),
        second.metrics(points(["reward/mean"], range(3))),
    ]
    second.claimant = ""  # and one that sends no claimant at all
    refused.append(second.post(STATUS_PATH, {"status": "succeeded"}))
    assert [r.status_code for r in refused] == [409] * 4
    assert "another process claimed it" in refused[0].json()["error"]
    run.refresh_from_db()
    assert (run.status, run.message, run.step, run.finished_at) == (RunStatus.RUNNING, "", 3, None)
    assert not MetricPoint.objects.filter(run=run).exists()
    # The claimant itself still reports, and its verdict is the one that counts.
    assert trainer.post(STATUS_PATH, {"status": "succeeded"}).json()["changed"] is True
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_a_cancelled_run_cannot_be_claimed(trainer: Trainer, run: Run) -> None:
    run.request_cancel()
    response = claim(trainer)
    # A cancelled run's token died with it (docs/security.md#run-tokens).
    assert (response.status_code, response.json()["code"]) == (401, "unauthenticated")
    assert Run.objects.get(pk=run.pk).claimed_by == ""


def test_the_trainer_reads_its_config(trainer: Trainer, run: Run) -> None:
    response = trainer.client.get(
        CONFIG_PATH.format(run_id=run.pk), HTTP_AUTHORIZATION=f"Bearer {trainer.token}"
    )
    assert response.status_code == 200 and response.json() == {"name": "r1"}
