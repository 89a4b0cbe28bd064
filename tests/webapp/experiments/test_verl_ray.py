"""verl runs on a real loopback Ray head that has no GPU: the precheck refuses them; with the
precheck off the watchdog marks the waiting job stalled, and cancel ends it and its actors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient
from ray.util.state import list_actors, list_jobs, list_placement_groups

from tests.webapp.polling import poll_until
from trainer.backends.verl.setup_hook import HOOK
from trainer.config import RunConfig
from webapp.experiments.executors import submission_id
from webapp.experiments.models import TERMINAL, Experiment, Run, RunStatus
from webapp.experiments.tasks import cancel_run, reap_runs

pytestmark = pytest.mark.slow


def verl_config(datasets: dict[str, Any], **changes: Any) -> RunConfig:
    return RunConfig.from_preset(
        "grpo",
        **{
            "name": "arith verl",
            "task": "arithmetic",
            "backend": "verl",
            "executor": "ray",
            "model.path": "tiny-test",
            "data.train_path": f"dataset:{datasets['train'].pk}",
            "data.val_path": None,
            "rollout.n": 2,
            "trainer.batch_size": 2,
            "optim.mini_batch_size": 2,
            "trainer.total_steps": 2,
            "resources.gpus_per_node": 1,
            "resources.cpus": 1,
            **changes,
        },
    )


@pytest.fixture
def verl_env(
    ray_head: Any, live_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The worker (a separate process) and this process reach the head and this live server."""
    for name, value in {"RAY_ADDRESS": ray_head.address, "STUDIO_PUBLIC_URL": live_server.url}.items():
        monkeypatch.setenv(name, value)
    settings.RAY_ADDRESS, settings.PUBLIC_URL = ray_head.address, live_server.url
    yield ray_head
    # A job left running by a failed test would hold the head's CPUs for the tests after it.
    client = JobSubmissionClient(ray_head.address)
    for job in client.list_jobs():
        if job.submission_id and not job.status.is_terminal():
            client.stop_job(job.submission_id)


@pytest.fixture
def watchdog_fast(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Precheck off and a 5 s stall limit, here and in workers started after this."""
    monkeypatch.setenv("STUDIO_VERL_PRECHECK", "0")
    monkeypatch.setenv("STUDIO_STALL_AFTER_S", "5")
    settings.VERL_PRECHECK, settings.STALL_AFTER_S = False, 5


def launch(personas: Any, config: RunConfig) -> Run:
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    (run,) = experiment.launch().runs
    return run


def status_is(run: Run, *statuses: str) -> Run | None:
    run.refresh_from_db()
    return run if run.status in statuses else None


def reaped_to(run: Run, *statuses: str) -> Run | None:
    """The reaper (in the worker) once more, then: has the run reached one of ``statuses``?"""
    if status_is(run, *statuses):
        return run
    reap_runs.delay()
    return None


def jobs_of(address: str, run: Run) -> list[Any]:
    return list_jobs(address=address, filters=[("submission_id", "=", submission_id(run))])


def leftovers(address: str, run: Run) -> list[str]:
    """Actors and placement groups of the run's Ray job (its drivers) that are still alive."""
    alive = []
    for job in jobs_of(address, run):
        if not job.job_id:
            continue
        for actor in list_actors(address=address, filters=[("job_id", "=", job.job_id)]):
            if actor.state != "DEAD":
                alive.append(f"actor {actor.class_name} {actor.state}")
        for group in list_placement_groups(address=address, filters=[("creator_job_id", "=", job.job_id)]):
            if group.state != "REMOVED":
                alive.append(f"placement group {group.placement_group_id} {group.state}")
    return alive


def test_a_verl_run_the_cluster_cannot_hold_is_refused_before_anything_is_submitted(
    personas: Any, arithmetic: Any, verl_env: Any, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, verl_config(arithmetic))
    poll_until(lambda: status_is(run, RunStatus.FAILED, RunStatus.RUNNING, RunStatus.SUCCEEDED))
    assert run.status == RunStatus.FAILED
    # GPU workers 3, TransferQueue 1 + 8, scheduling 1, the driver 1 (trainer.backends.verl.needs).
    assert "needs 1 node(s) with 1 GPU(s) and 3 CPUs each, and 14 CPUs in all" in run.message
    assert "it has 1 alive node(s) (0 GPU(s) / 2 CPUs), 2 CPUs in all" in run.message
    assert "STUDIO_VERL_PRECHECK=0" in run.message
    assert jobs_of(verl_env.address, run) == []


def test_a_verl_job_pending_for_cpus_is_stalled_and_cancel_ends_the_run(
    personas: Any, arithmetic: Any, verl_env: Any, watchdog_fast: None, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, verl_config(arithmetic, **{"resources.cpus": 3}))  # the head has 2
    poll_until(lambda: reaped_to(run, RunStatus.STALLED), every_s=1.0)
    assert "has not started the trainer within 5 s" in run.message
    client = JobSubmissionClient(verl_env.address)
    assert client.get_job_status(submission_id(run)) == JobStatus.PENDING

    assert run.request_cancel()
    cancel_run.delay(run.pk)
    poll_until(lambda: reaped_to(run, RunStatus.CANCELLED, RunStatus.FAILED), every_s=1.0)
    assert run.status == RunStatus.CANCELLED, run.message
    assert leftovers(verl_env.address, run) == []


def test_verl_waiting_for_cpus_is_stalled_and_cancel_stops_the_job_and_its_actors(
    personas: Any, arithmetic: Any, verl_env: Any, watchdog_fast: None, start_worker: Any, live_server: Any
) -> None:
    # The real thing: the trainer CLI claims the run, the verl driver starts verl's main_ppo, and
    # TransferQueue's eight storage units (one CPU each) wait forever for the head's two CPUs.
    start_worker()
    run = launch(personas, verl_config(arithmetic))
    address, job = verl_env.address, submission_id(run)
    client = JobSubmissionClient(address)
    poll_until(lambda: status_is(run, RunStatus.RUNNING, RunStatus.STALLED, *TERMINAL))  # the CLI claimed it
    runtime_env = client.get_job_info(job).runtime_env
    env = runtime_env["env_vars"]
    assert runtime_env["worker_process_setup_hook"] == HOOK
    assert env["STUDIO_API_URL"] == live_server.url and env["STUDIO_RUN_ID"] == str(run.pk)
    assert env["MLFLOW_TRACKING_URI"] == f"{env['STUDIO_API_URL']}/mlflow"
    assert env["MLFLOW_RUN_ID"] == run.mlflow_run_id
    assert env["MLFLOW_TRACKING_TOKEN"] == env["STUDIO_RUN_TOKEN"]

    poll_until(lambda: "actor SimpleStorageUnit PENDING_CREATION" in leftovers(address, run), every_s=1.0)
    poll_until(lambda: reaped_to(run, RunStatus.STALLED), every_s=1.0)
    assert "no heartbeat or progress for 5 s while the trainer is alive: verl may be waiting" in run.message
    assert client.get_job_status(job) == JobStatus.RUNNING

    assert run.request_cancel()
    cancel_run.delay(run.pk)
    poll_until(lambda: reaped_to(run, *TERMINAL), every_s=1.0)
    assert run.status == RunStatus.CANCELLED, run.message
    assert poll_until(lambda: client.get_job_status(job).is_terminal() and client.get_job_status(job)) == (
        JobStatus.STOPPED
    )
    poll_until(lambda: leftovers(address, run) == [], every_s=0.5)  # Ray reaps a stopped job's actors
