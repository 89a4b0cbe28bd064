"""An import is a job (docs/imports.md#as-a-job): the request saves the files and answers; a real
Celery worker reads and stores them. The request's limits answer before any work: 413 past the
upload limit, 429 past the member's imports at once; the page follows the job to its run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.webapp.polling import poll_until
from webapp.accounts.models import ApiToken
from webapp.experiments.jobs import Job, JobStatus
from webapp.experiments.models import Run
from webapp.ingestion.models import Trajectory
from webapp.results.import_jobs import IMPORT_JOB, IMPORT_TASK

LINES = 2_000  # enough that storing them is work; the finding's dumps were far larger


def verl_dump(folder: Path, step: int, lines: int = LINES) -> Path:
    """A verl rollout dump of ``lines`` samples, 8 rollouts per prompt (verl's own line shape)."""
    path = folder / f"{step}.jsonl"
    rows = (
        {
            "input": f"What is {i // 8}+1?",
            "output": f"{i % 8}",
            "gts": "1",
            "score": float(i % 2),
            "step": step,
        }
        for i in range(lines)
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def post(client: Client, token: str, files: list[Path], **headers: Any) -> Any:
    handles = [path.open("rb") for path in files]
    try:
        return client.post(
            "/api/t/acme/imports", {"dump": handles}, HTTP_AUTHORIZATION=f"Bearer {token}", **headers
        )
    finally:
        for handle in handles:
            handle.close()


@pytest.mark.django_db(transaction=True)
def test_an_import_answers_before_its_work_is_done_and_a_worker_does_it(
    personas: dict[str, Any], start_worker: Any, tmp_path: Path
) -> None:
    """The finding: imports ran inside the web request (a 2.9 MB dump held a web thread ~120 s). The
    request is answered while no worker runs yet, so the work cannot have been done in it: the job
    is still queued and no run exists. Then a worker starts and does it."""
    token = ApiToken.issue(personas["bob"], "tests")[1]
    client = Client()
    answer = post(client, token, [verl_dump(tmp_path, 1), verl_dump(tmp_path, 2)])
    assert answer.status_code == 202, answer.content
    job = Job.objects.get(pk=answer.json()["id"])
    assert (answer.json()["status"], job.status, job.run_id) == ("queued", JobStatus.QUEUED, None)
    assert not Run.objects.exists() and not Trajectory.objects.exists()
    assert sorted(p.name for p in job.folder.iterdir()) == ["dump-0", "dump-1"]

    start_worker()

    def finished() -> dict[str, Any] | None:
        state: dict[str, Any] = client.get(
            f"/api/t/acme/imports/{job.pk}", HTTP_AUTHORIZATION=f"Bearer {token}"
        ).json()
        return state if state["status"] in ("done", "failed") else None

    done = poll_until(finished)
    assert done["status"] == "done", done
    assert done["result"] == {"format": "verl", "trajectories": 2 * LINES, "points": 0, "steps": 2}
    run = Run.objects.get(pk=done["run"]["id"])
    assert Trajectory.objects.filter(run=run).count() == 2 * LINES and run.is_external
    assert not job.folder.exists()  # the upload goes with the job


def test_an_upload_past_the_import_limit_is_413_with_the_reason_and_makes_no_job(
    client: Client, personas: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    settings.IMPORT_MAX_BYTES = 1000
    token = ApiToken.issue(personas["bob"], "tests")[1]
    answer = post(client, token, [verl_dump(tmp_path, 1, lines=50)])
    assert answer.status_code == 413
    assert answer.json()["code"] == "too_large" and "STUDIO_IMPORT_MAX_BYTES" in answer.json()["error"]
    assert not Job.objects.exists()


def test_a_members_imports_past_the_limit_are_429_with_the_reason_and_others_still_import(
    client: Client, personas: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    settings.IMPORTS_PER_MEMBER = 1
    waiting = Job.objects.create(
        kind=IMPORT_JOB, task=IMPORT_TASK, team=personas["acme"], user=personas["bob"]
    )
    bob, alice = (ApiToken.issue(personas[name], "tests")[1] for name in ("bob", "alice"))
    dump = verl_dump(tmp_path, 1, lines=10)
    refused = post(client, bob, [dump])
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    assert "STUDIO_IMPORTS_PER_MEMBER is 1" in refused.json()["error"]
    assert post(client, alice, [dump]).status_code == 202
    Job.objects.filter(pk=waiting.pk).update(status=JobStatus.DONE)
    assert post(client, bob, [dump]).status_code == 202


def test_the_import_page_hands_the_upload_to_a_job_whose_page_follows_it_to_the_run(
    personas: dict[str, Any], tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    from webapp.celery import app

    client = Client()
    client.force_login(personas["bob"])
    with verl_dump(tmp_path, 3, lines=16).open("rb") as dump:
        answer = client.post("/t/acme/runs/import/", {"dump": dump, "experiment": "imports"})
    job = Job.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/t/acme/runs/import/{job.pk}/"
    page = client.get(answer["Location"]).content.decode()
    assert 'data-status="queued"' in page and 'hx-trigger="every 2s"' in page
    app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job.enqueue()  # what the request's commit does, here in this process
    finally:
        app.conf.task_always_eager = False
    poll = client.get(answer["Location"], headers={"HX-Request": "true", "HX-Target": "import-job"})
    assert poll.status_code == 286  # htmx stops polling: the job is done
    run = Run.objects.get()
    assert (
        f'href="/t/acme/runs/{run.pk}/"' in poll.content.decode()
        and "Imported 16 trajectories" in poll.content.decode()
    )


def test_a_job_whose_task_was_lost_is_sent_again_and_one_whose_worker_was_lost_fails(
    personas: dict[str, Any],
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from webapp.celery import app
    from webapp.experiments.jobs import LOST_RUNNING_AFTER, RESEND_QUEUED_AFTER, resend_lost_jobs

    acme, bob = personas["acme"], personas["bob"]
    lost_task = Job.objects.create(
        kind=IMPORT_JOB,
        task=IMPORT_TASK,
        team=acme,
        user=bob,
        options={"dumps": [], "experiment": "imports", "name": ""},
    )
    lost_worker = Job.objects.create(
        kind=IMPORT_JOB,
        task=IMPORT_TASK,
        team=acme,
        user=bob,
        status=JobStatus.RUNNING,
        started_at=timezone.now(),
    )
    assert resend_lost_jobs() == []  # a fresh job is left to its own task
    assert Job.active().count() == 2
    Job.objects.filter(pk=lost_task.pk).update(
        created=timezone.now() - RESEND_QUEUED_AFTER - timedelta(seconds=1)
    )
    Job.objects.filter(pk=lost_worker.pk).update(
        started_at=timezone.now() - LOST_RUNNING_AFTER - timedelta(seconds=1)
    )
    assert Job.active().count() == 1  # a lost worker's job no longer counts against its member's limit
    app.conf.task_always_eager = True
    try:
        assert resend_lost_jobs() == [lost_task.pk]
    finally:
        app.conf.task_always_eager = False
    lost_task.refresh_from_db()
    lost_worker.refresh_from_db()
    assert lost_task.status == JobStatus.FAILED and "nothing to import" in lost_task.message  # it ran
    assert lost_worker.status == JobStatus.FAILED and "worker was lost" in lost_worker.message
