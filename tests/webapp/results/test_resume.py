"""Resuming a run (docs/resume.md) through the REST API, the page and the ingestion API the trainer
posts to: what the first attempt stored after the checkpoint is superseded, each attempt is listed, and
a run that cannot be resumed is refused with the reason at request time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from tests.trainer.backends.checkpoint_folders import torch_checkpoint
from tests.webapp.trainer_posts import Trainer, points, trajectory
from trainer.config import RunConfig
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion import metrics_store
from webapp.ingestion.models import Checkpoint, MetricPoint, Trajectory
from webapp.monitoring.models import HealthAlert, RunHealth

KEYS = ["reward/mean", "actor/kl"]


@pytest.fixture
def api(client: Client, personas: Any) -> Any:
    """POST and GET on the team's REST paths with alice's personal token."""
    token = ApiToken.issue(personas["alice"], "resume")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def call(method: str, path: str) -> Any:
        return getattr(client, method)(f"/api/t/acme{path}", content_type="application/json", **headers)

    return call


def make_run(personas: Any, *, resume: bool = True, seed: int = 1, **fields: Any) -> Run:
    experiment, _ = Experiment.objects.get_or_create(
        team=personas["acme"], name="resumable", task="arithmetic"
    )
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=seed, config={}, **fields)
    settings = {
        "model.path": "tiny-test",
        "trainer.checkpoint_dir": checkpoint_dir(run),
        "trainer.resume": resume,
    }
    config = RunConfig.from_preset("grpo", task="arithmetic", **settings)
    Run.objects.filter(pk=run.pk).update(config=json.loads(config.to_json()))
    run.refresh_from_db()
    return run


def failed_at_step_5_with_a_checkpoint_of_step_3(client: Client, personas: Any) -> Run:
    """A run whose trainer stored steps 1 to 5, checkpointed step 3 and died."""
    run = make_run(personas)
    trainer = Trainer(client, run.pk, run.issue_token())
    assert trainer.metrics(points(KEYS, range(1, 6))).status_code == 200
    for step in (2, 4):
        batch = [trajectory(f"s{step}-p0-s0", f"step{step}-p0", 1.0)]
        assert trainer.trajectories(step, batch, batch_id=f"t{step}").status_code == 200
    torch_checkpoint(Path(checkpoint_dir(run)), 3, resumable=True)
    Checkpoint.objects.create(run=run, step=3, path=str(Path(checkpoint_dir(run)) / "step_00000003"))
    Checkpoint.objects.create(run=run, step=5, path="/gone", deleted=True)  # reported, then lost
    run.refresh_from_db()
    assert run.finish(RunStatus.FAILED, "the trainer exited with code 137")
    return run


def test_a_resume_supersedes_what_came_after_the_checkpoint_and_the_new_attempt_draws_one_line(
    client: Client, personas: Any, api: Any
) -> None:
    run = failed_at_step_5_with_a_checkpoint_of_step_3(client, personas)
    answer = api("post", f"/runs/{run.pk}/resume")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["resumed_from_step"], body["attempt"], body["superseded_points"]) == (3, 2, len(KEYS) * 2)
    assert body["run"]["status"] == RunStatus.QUEUED and body["run"]["step"] == 3
    assert set(MetricPoint.objects.filter(run=run).values_list("step", flat=True)) == {1, 2, 3}
    assert metrics_store.latest_values(run.pk)["reward/mean"][0] == 3  # the latest values are rebuilt
    assert list(Trajectory.objects.filter(run=run).values_list("training_step", flat=True)) == [2]
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [3]

    # The second attempt reports steps 4 and 5 again, with other values: stored, once each.
    trainer = Trainer(client, run.pk, run.issue_token())
    assert trainer.metrics(points(KEYS, range(4, 6), value=9.0), batch_id="again").status_code == 200
    assert (
        trainer.trajectories(4, [trajectory("s4-p0-s0", "step4-p0", 0.0)], batch_id="t4b").status_code == 200
    )
    curve = metrics_store.downsample(run.pk, "reward/mean")
    assert curve.step == [1, 2, 3, 4, 5] and curve.value[3:] == [9.0, 9.0]
    assert Trajectory.objects.get(run=run, training_step=4).total_reward == 0.0
    run.refresh_from_db()
    assert run.finish(RunStatus.SUCCEEDED)

    attempts = api("get", f"/runs/{run.pk}/attempts").json()
    assert [(a["number"], a["resumed_from_step"], a["end_status"]) for a in attempts] == [
        (1, None, "failed"),
        (2, 3, "succeeded"),
    ]
    assert "code 137" in attempts[0]["end_message"] and attempts[1]["ended_at"]
    client.login(username="alice", password=PASSWORD)
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert 'id="run-attempts"' in page and "checkpoint step 3" in page
    data = client.get(f"/t/acme/curves.json?run={run.pk}&key=reward/mean").json()
    assert data["runs"][str(run.pk)]["resumed_from"] == [3]


def test_the_page_resumes_after_a_confirmation_and_a_second_resume_is_refused(
    client: Client, personas: Any
) -> None:
    run = failed_at_step_5_with_a_checkpoint_of_step_3(client, personas)
    client.login(username="bob", password=PASSWORD)  # a member
    assert 'id="resume-run"' in client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    confirm = client.get(f"/t/acme/runs/{run.pk}/resume/")
    assert confirm.status_code == 200 and 'id="resume-step">step 3' in confirm.content.decode()
    done = client.post(f"/t/acme/runs/{run.pk}/resume/", follow=True)
    assert "Resumed as attempt 2" in done.content.decode()
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.attempts.get(number=2).resumed_by == personas["bob"]
    again = client.post(f"/t/acme/runs/{run.pk}/resume/", follow=True).content.decode()
    assert "still queued" in again and run.attempts.count() == 2


def test_runs_that_cannot_be_resumed_are_refused_with_the_reason(
    client: Client, personas: Any, api: Any
) -> None:
    running = make_run(personas, seed=1)
    Trainer(client, running.pk, running.issue_token())
    running.refresh_from_db()
    succeeded = make_run(personas, seed=2, status=RunStatus.SUCCEEDED)
    empty = make_run(personas, seed=3, status=RunStatus.FAILED)
    weights_only = make_run(personas, seed=4, status=RunStatus.CANCELLED, resume=False)
    torch_checkpoint(Path(checkpoint_dir(weights_only)), 2, resumable=False)
    evaluation = make_run(personas, seed=5, status=RunStatus.FAILED, kind=RunKind.EVALUATION)
    refused = {
        running: "still running",
        succeeded: "it is succeeded",
        empty: "no complete checkpoint",
        weights_only: "cannot resume the optimiser state",
        evaluation: "an evaluation is not resumed",
    }
    for run, why in refused.items():
        answer = api("post", f"/runs/{run.pk}/resume")
        assert answer.status_code == 409 and why in answer.json()["error"], (why, answer.content)
        assert Run.objects.get(pk=run.pk).status == run.status and not run.attempts.exists()
    assert "weights only" in api("post", f"/runs/{weights_only.pk}/resume").json()["error"]
    client.login(username="alice", password=PASSWORD)
    page = client.get(f"/t/acme/runs/{weights_only.pk}/resume/")
    assert page.status_code == 200 and "weights only" in page.content.decode()
    assert 'id="resume-run"' not in client.get(f"/t/acme/runs/{running.pk}/").content.decode()
    for run in (empty, weights_only):  # over, but their checkpoints do not allow it: said, not offered
        shown = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
        assert 'id="resume-run"' not in shown and 'id="not-resumable"' in shown and refused[run] in shown
    other = make_run({**personas, "acme": personas["other"]}, seed=6, status=RunStatus.FAILED)
    assert api("post", f"/runs/{other.pk}/resume").status_code == 404


def test_a_stalled_run_is_resumed_once_its_trainer_is_killed(client: Client, personas: Any, api: Any) -> None:
    run = failed_at_step_5_with_a_checkpoint_of_step_3(client, personas)
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.STALLED, finished_at=None, executor_ref=f"pgid:{hung.pid}"
        )
        answer = api("post", f"/runs/{run.pk}/resume")
        assert answer.status_code == 200, answer.content
        assert hung.wait(30) == -signal.SIGKILL
        assert run.attempts.get(number=1).end_status == RunStatus.STALLED
    finally:
        if hung.poll() is None:
            hung.kill()
            hung.wait()


def test_a_resume_rewinds_the_health_checks_to_the_checkpoint(
    client: Client, personas: Any, api: Any
) -> None:
    """A verdict the first attempt read after the checkpoint is withdrawn, a firing that began after it
    ends, one that began before it stays; every window forgets the steps after it; alerts stay."""
    run = failed_at_step_5_with_a_checkpoint_of_step_3(client, personas)
    window = {"actor/kl": [[step, 0.1 * step] for step in range(1, 6)]}
    states = {
        "kl_blowup": {"firing": True, "since_step": 4, "step": 5, "value": 0.5},
        "clip_fraction": {"firing": True, "since_step": 2, "step": 5, "value": 0.5},
        "non_finite": {"firing": False, "since_step": None, "step": 3, "value": 0.0},
    }
    for name, state in states.items():  # the first attempt's verdicts, over its own batches'
        RunHealth.objects.update_or_create(run=run, check_name=name, defaults={**state, "window": window})
    alerts = list(HealthAlert.objects.filter(run=run).values_list("pk", flat=True))

    assert api("post", f"/runs/{run.pk}/resume").status_code == 200
    rows = {row.check_name: row for row in RunHealth.objects.filter(run=run)}
    after = rows["kl_blowup"]
    assert (after.firing, after.since_step, after.step, after.value) == (False, None, None, None)
    before = rows["clip_fraction"]
    assert (before.firing, before.since_step, before.step) == (True, 2, None)
    untouched = rows["non_finite"]
    assert (untouched.step, untouched.value) == (3, 0.0)
    for row in rows.values():
        assert all(step <= 3 for points in row.window.values() for step, _value in points), row.check_name
    assert [step for step, _value in after.window["actor/kl"]] == [1, 2, 3]
    assert list(HealthAlert.objects.filter(run=run).values_list("pk", flat=True)) == alerts
