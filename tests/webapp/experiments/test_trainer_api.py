"""The trainer's lifecycle calls: one claim owns the run; nothing else claims it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.webapp.results.conftest import Trainer
from trainer.contract import CLAIM_PATH, CONFIG_PATH, STATUS_PATH
from webapp.experiments.models import Experiment, Run, RunStatus


@pytest.fixture
def run(personas: Any) -> Run:
    experiment = Experiment.objects.create(team=personas["acme"], name="gsm8k grpo", task="gsm8k")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={"name": "r1"})
    run.enqueue()
    return run


@pytest.fixture
def trainer(client: Client, run: Run) -> Trainer:
    return Trainer(client, run.pk, run.issue_token())


def test_the_run_is_claimed_once_and_a_repeat_or_running_report_claims_nothing(
    trainer: Trainer, run: Run
) -> None:
    assert trainer.post(CLAIM_PATH, {"worker": "host:1"}).json() == {
        "status": "running",
        "claimed_by": "host:1",
    }
    run.refresh_from_db()
    started = run.started_at
    # The same worker retrying its claim (its first answer lost) is told yes; nothing moves.
    assert trainer.post(CLAIM_PATH, {"worker": "host:1"}).status_code == 200
    running = trainer.post(STATUS_PATH, {"status": "running", "message": "training"})
    assert running.status_code == 200 and running.json()["status"] == "running"
    run.refresh_from_db()
    assert (run.claimed_by, run.started_at, run.message) == ("host:1", started, "training")
    other = trainer.post(CLAIM_PATH, {"worker": "host:2"})
    assert other.status_code == 409 and "owner: host:1" in other.json()["error"]
    run.refresh_from_db()
    assert (run.claimed_by, run.started_at) == ("host:1", started)


def test_running_or_a_claim_without_a_worker_is_refused_and_claims_nothing(
    trainer: Trainer, run: Run
) -> None:
    response = trainer.post(STATUS_PATH, {"status": "running", "message": "hi"})
    assert response.status_code == 409 and "claimed" in response.json()["error"]
    assert trainer.post(CLAIM_PATH, {"worker": ""}).status_code == 400
    run.refresh_from_db()
    assert (run.status, run.claimed_by, run.message) == (RunStatus.QUEUED, "", "")


def test_a_cancelled_run_cannot_be_claimed(trainer: Trainer, run: Run) -> None:
    run.request_cancel()
    response = trainer.post(CLAIM_PATH, {"worker": "host:1"})
    # A cancelled run's token died with it (docs/security.md#run-tokens).
    assert (response.status_code, response.json()["code"]) == (401, "unauthenticated")
    assert Run.objects.get(pk=run.pk).claimed_by == ""


def test_the_trainer_reads_its_config(trainer: Trainer, run: Run) -> None:
    response = trainer.client.get(
        CONFIG_PATH.format(run_id=run.pk), HTTP_AUTHORIZATION=f"Bearer {trainer.token}"
    )
    assert response.status_code == 200 and response.json() == {"name": "r1"}
