"""Faults around launching, for real: a worker killed inside its launch task, two launches at once.

The reaper's steps run here in the test process (services.reconcile, what beat's reap_runs calls for
every active run), so the test decides when it looks; the workers and the trainer are real processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from tests.webapp.experiments.test_launching import launch, settled, tiny_config
from tests.webapp.polling import poll_until
from trainer.contract import IDEMPOTENCY_HEADER
from webapp.accounts.models import ApiToken
from webapp.experiments import services
from webapp.experiments.models import Experiment, Run, RunStatus

pytestmark = pytest.mark.slow


def reconciled(run: Run) -> Run:
    services.reconcile(Run.objects.get(pk=run.pk))
    run.refresh_from_db()
    return run


def test_a_worker_killed_inside_its_launch_task_twice_still_ends_with_one_trained_run(
    personas: Any,
    arithmetic: Any,
    launch_env: Any,
    start_worker: Any,
    settings: Any,
) -> None:
    settings.RELAUNCH_AFTER_S = 0  # the reaper's wait for a slow launch task, cut for the test
    first = start_worker(fault="die-before-start")
    run = launch(personas, tiny_config(arithmetic))
    poll_until(lambda: first.proc.poll() is not None)  # killed after marking the run starting
    run.refresh_from_db()
    assert (run.status, run.executor_ref, run.launch_attempts) == (RunStatus.STARTING, "", 1)

    # Nothing was started, so the reaper starts it again, on a worker that dies once the trainer runs.
    second = start_worker(fault="die-after-start")
    assert reconciled(run).status == RunStatus.QUEUED
    poll_until(lambda: second.proc.poll() is not None)
    run.refresh_from_db()
    assert run.executor_ref == "" and run.launch_attempts == 2  # the trainer runs; nobody recorded it
    try:
        # The reaper finds the unrecorded start by its process group file and watches it as usual.
        poll_until(lambda: reconciled(run).executor_ref or run.is_terminal)
        assert run.executor_ref.startswith("pgid:")
        poll_until(lambda: settled(reconciled(run)), every_s=0.5)
        poll_until(lambda: (_run_dir(run) / "exit_code").exists())  # the trainer exits by itself
    finally:
        _kill_group(run)  # what is left of it when the test failed
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.step == run.total_steps == 2 and run.claimant
    assert not (_run_dir(run) / "tmp").exists()  # its scratch space went with it


def test_a_lost_start_is_tried_at_most_three_times_then_failed(personas: Any, settings: Any) -> None:

    settings.RELAUNCH_AFTER_S = 0
    experiment = Experiment.objects.create(team=personas["acme"], name="lost", task="arithmetic")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={})
    run.enqueue()
    for attempt in range(1, services.MAX_LAUNCH_ATTEMPTS + 1):
        assert run.mark_starting("")  # a launch task that died before starting anything
        assert run.launch_attempts == attempt
        services.reconcile(run)
        run.refresh_from_db()
        if attempt < services.MAX_LAUNCH_ATTEMPTS:
            assert run.status == RunStatus.QUEUED, run.message
    assert run.status == RunStatus.FAILED
    assert "start was lost 3 times" in run.message and run.finished_at is not None


def test_cancelling_a_start_that_was_lost_cancels_it(personas: Any, settings: Any) -> None:

    experiment = Experiment.objects.create(team=personas["acme"], name="lost", task="arithmetic")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={})
    run.enqueue()
    run.mark_starting("")
    assert run.request_cancel() and not run.is_terminal  # starting: only a request, nothing to signal
    services.reconcile(run)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_a_cancel_pressed_while_a_start_was_lost_is_applied_when_the_reaper_recovers_it(
    personas: Any, settings: Any
) -> None:
    experiment = Experiment.objects.create(team=personas["acme"], name="lost", task="arithmetic")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={})
    run.enqueue()
    run.mark_starting("")
    # The launching worker died after the trainer started and claimed the run, before recording it:
    # only the wrapper's pgid file says where it is (a sleep stands in for the trainer).
    trainer = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        (_run_dir(run) / "pgid").write_text(str(trainer.pid))
        assert run.claim("w", "claimant-1")
        assert run.request_cancel(personas["alice"]) and not run.is_terminal
        services.stop_executor(run)  # what the cancel task does: no process recorded, nothing to signal

        reconciled(run)  # the reaper finds the start, well inside STUDIO_CANCEL_GRACE_S

        assert trainer.wait(30) == -signal.SIGKILL  # killed then, not when the grace period ends
        assert (run.status, run.message) == (RunStatus.CANCELLED, "cancelled by alice")
        assert not run.report(RunStatus.SUCCEEDED)  # a trainer's late verdict changes nothing
        run.refresh_from_db()
        assert run.status == RunStatus.CANCELLED
    finally:
        trainer.kill()
        trainer.wait()


def _run_dir(run: Run) -> Any:
    from webapp.experiments.executors import run_dir

    return run_dir(run)


def _kill_group(run: Run) -> None:
    run.refresh_from_db()
    if run.executor_ref.startswith("pgid:"):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(run.executor_ref.removeprefix("pgid:")), signal.SIGKILL)


# -- two launches at once ---------------------------------------------------------------------------


def _at_once(*calls: Any) -> list[Any]:
    """Run the calls in threads released together, so that their requests overlap."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def call(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_posts_of_one_launch_form_launch_once(
    personas: Any, arithmetic: Any, transactional_db: Any
) -> None:
    experiment = Experiment.create(personas["acme"], personas["alice"], tiny_config(arithmetic), [1, 2])
    url = f"/t/acme/experiments/{experiment.pk}/launch/"

    def post() -> int:
        client = Client()
        client.login(username="alice", password=PASSWORD)
        return client.post(url, {"launch_key": "double-click-1"}).status_code

    assert _at_once(post, post) == [302, 302]
    runs = Run.objects.filter(experiment=experiment)
    assert sorted(runs.values_list("seed", flat=True)) == [1, 2]  # one run per seed, not two
    assert set(runs.values_list("launch_key", flat=True)) == {"double-click-1"}


def test_two_rest_launches_at_once_make_one_set_of_runs(
    personas: Any, arithmetic: Any, transactional_db: Any
) -> None:
    experiment = Experiment.create(personas["acme"], personas["alice"], tiny_config(arithmetic), [1])
    token = ApiToken.issue(personas["alice"], "rest")[1]
    url = f"/api/t/acme/experiments/{experiment.pk}/launch"

    def post(key: str = "") -> Any:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        if key:
            headers["HTTP_" + IDEMPOTENCY_HEADER.upper().replace("-", "_")] = key
        return Client().post(url, **headers)

    # Without a key, the experiment's own guard: the second finds seed 1 queued and is refused.
    first, second = sorted(_at_once(post, post), key=lambda response: response.status_code)
    assert (first.status_code, second.status_code) == (202, 409)
    assert "seed(s) 1" in second.json()["error"]
    assert Run.objects.filter(experiment=experiment).count() == 1
    # With a key, a replay answers the same runs and makes none.
    Run.objects.filter(experiment=experiment).update(status=RunStatus.CANCELLED)
    keyed = _at_once(lambda: post("rest-key-1"), lambda: post("rest-key-1"))
    assert [r.status_code for r in keyed] == [202, 202]
    assert keyed[0].json() == keyed[1].json()
    assert sorted(r.get("Idempotent-Replayed", "") for r in keyed) == ["", "true"]
    assert Run.objects.filter(experiment=experiment).count() == 2
