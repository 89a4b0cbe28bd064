"""Runs whose trainer hangs, whose reports come late or whose stored config is old: the reaper's
verdicts and the pages stay true (docs/reliability.md#stalls).

The reaper's step (services.reconcile) runs here in the test process; the hung trainer is a real
process group, stopped with SIGSTOP the way a debugger or a frozen node stops one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.conftest import PASSWORD
from tests.webapp.trainer_posts import Trainer, points
from webapp.experiments import services
from webapp.experiments.executors import run_dir
from webapp.experiments.models import Experiment, Run, RunStatus


@pytest.fixture
def run(personas: Any) -> Run:
    experiment = Experiment.objects.create(team=personas["acme"], name="faults", task="arithmetic")
    return Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={})


def ago(seconds: float) -> Any:
    return timezone.now() - timedelta(seconds=seconds)


def test_a_hung_trainer_is_failed_and_its_stopped_process_killed(run: Run, settings: Any) -> None:
    settings.FAIL_AFTER_S, settings.STALL_AFTER_S = 120, 300
    scratch = run_dir(run) / "tmp"
    scratch.mkdir()
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        run.enqueue()
        run.mark_starting(f"pgid:{trainer.pid}")
        run.claim("host:1", "hung-claimant")
        os.kill(trainer.pid, signal.SIGSTOP)  # alive to the executor, silent to the server
        Run.objects.filter(pk=run.pk).update(heartbeat_at=ago(60), progress_at=ago(60))
        services.reconcile(Run.objects.get(pk=run.pk))
        assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING  # under the limit: not yet

        Run.objects.filter(pk=run.pk).update(heartbeat_at=ago(200), progress_at=ago(200))
        services.reconcile(Run.objects.get(pk=run.pk))
        run.refresh_from_db()
        assert run.status == RunStatus.FAILED and "STUDIO_FAIL_AFTER_S" in run.message
        assert run.finished_at is not None
        assert trainer.wait(30) == -signal.SIGKILL  # SIGTERM would wait for ever on a stopped process
        assert not scratch.exists()
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def test_a_backlog_of_metric_batches_is_progress_and_clears_the_stall(
    client: Client, run: Run, settings: Any
) -> None:
    settings.STALL_AFTER_S = 60
    trainer = Trainer(client, run.pk, run.issue_token())
    Run.objects.filter(pk=run.pk).update(heartbeat_at=ago(600), progress_at=ago(600))
    assert run.mark_stalled("no heartbeat for 600 s", 60)
    # After an outage the trainer drains its spool: metrics first, no heartbeat yet.
    assert trainer.metrics(points(["reward/mean"], range(5, 8))).status_code == 200
    run.refresh_from_db()
    assert (run.status, run.message, run.step) == (RunStatus.RUNNING, "", 7)
    assert not run.mark_stalled("no heartbeat", 60)


def test_a_heartbeat_after_the_end_moves_nothing_and_success_shows_every_step(
    client: Client, run: Run
) -> None:
    Trainer(client, run.pk, run.issue_token())
    run.heartbeat(step=9, total_steps=10)  # the last step's beat is still in flight
    assert run.finish(RunStatus.SUCCEEDED)
    run.refresh_from_db()
    assert (run.step, run.total_steps) == (10, 10)

    failed = Run.objects.create(experiment=run.experiment, team=run.team, seed=2, config={})
    Trainer(client, failed.pk, failed.issue_token())
    failed.finish(RunStatus.FAILED, "boom")
    Run.objects.filter(pk=failed.pk).update(progress_at=ago(600), heartbeat_at=ago(600))
    assert not failed.heartbeat(step=3, total_steps=10)
    failed.refresh_from_db()
    assert failed.progress_at < ago(500) and failed.step == 0 and failed.message == "boom"


OLD_CONFIG = {  # a run frozen by an older version: a preset and a field that no longer exist
    "name": "old one",
    "task": "arithmetic",
    "preset": "stepppo-v0",
    "trainer": {"seed": 1, "steps_per_epoch_old": 4},
}


def test_pages_of_a_run_whose_stored_config_no_longer_validates_show_it_as_stored(
    client: Client, personas: Any
) -> None:
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="old", task="arithmetic", config=OLD_CONFIG)
    run = Run.objects.create(experiment=experiment, team=team, seed=1, config=OLD_CONFIG, name="old run")
    client.login(username="alice", password=PASSWORD)
    for url in (f"/t/{team.slug}/runs/{run.pk}/", f"/t/{team.slug}/experiments/{experiment.pk}/"):
        page = client.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert 'id="config-problem"' in text and "steps_per_epoch_old" in text and "stepppo-v0" in text
    clone = client.get(f"/t/{team.slug}/experiments/new/?clone={experiment.pk}")
    assert clone.status_code == 200  # the form opens on defaults instead of failing on the old config
