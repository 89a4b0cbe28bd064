"""Launching for real: a Celery worker starts `python -m trainer run --run-id N` locally or as a Ray
job; the trainer claims its run and reports to the live test server; the reaper reconciles."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from tests.webapp.polling import poll_until
from trainer.config import RunConfig
from webapp.experiments import services
from webapp.experiments.executors import EXECUTORS, submission_id
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.experiments.tasks import reap_runs
from webapp.ingestion.models import Checkpoint, MetricPoint, Trajectory

pytestmark = pytest.mark.slow


def tiny_config(datasets: dict[str, Any], *, executor: str = "local", steps: int = 2) -> RunConfig:
    return RunConfig.from_preset(
        "grpo",
        **{
            "name": f"arith {executor} {steps}",
            "task": "arithmetic",
            "executor": executor,
            "model.path": "tiny-test",
            "data.train_path": f"dataset:{datasets['train'].pk}",
            "data.val_path": None,
            "data.max_prompt_length": 1024,
            "rollout.n": 2,
            "rollout.max_new_tokens": 8,
            "rollout.max_steps": 2,
            "rollout.tools": ["calculator"],
            "trainer.total_steps": steps,
            "trainer.batch_size": 2,
            "optim.mini_batch_size": 4,
            "trainer.save_every": 0,
            "trainer.num_threads": 1,
            "resources.cpus": 1,
        },
    )


def launch(personas: Any, config: RunConfig) -> Run:
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    (run,) = experiment.launch().runs
    return run


def settled(run: Run) -> Run | None:
    run.refresh_from_db()
    return run if run.is_terminal else None


def settled_by_reaper(run: Run) -> Run | None:
    """Terminal yet? If not, ask the worker to reap once more (beat does this every few seconds)."""
    if settled(run):
        return run
    reap_runs.delay()
    return None


def test_a_local_run_trains_reports_and_succeeds_and_a_retried_launch_task_starts_no_second_process(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, tiny_config(arithmetic))
    poll_until(lambda: Run.objects.filter(pk=run.pk).exclude(executor_ref="").exists())
    run.refresh_from_db()
    ref = run.executor_ref
    services.start_run(Run.objects.get(pk=run.pk))  # a redelivered launch task
    run.refresh_from_db()
    assert run.executor_ref == ref
    poll_until(lambda: settled(run), every_s=0.5)
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.claimed_by and run.executor_ref.startswith("pgid:")
    assert MetricPoint.objects.filter(run=run, key__name="reward/mean").count() == 2
    assert Trajectory.objects.filter(run=run).count() == 2 * 2 * 2  # steps x prompts x n
    assert Checkpoint.objects.filter(run=run).exists()
    poll_until(lambda: not trainer_processes(run))  # the process exits by itself after reporting


def trainer_processes(run: Run) -> list[psutil.Process]:
    pgid = int(run.executor_ref.removeprefix("pgid:"))
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if os.getpgid(proc.pid) == pgid and "trainer" in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def test_kill_9_on_a_local_run_ends_failed_and_leaves_nothing_running(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, tiny_config(arithmetic, steps=10_000))
    poll_until(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists())
    run.refresh_from_db()
    victims = poll_until(lambda: [p for p in trainer_processes(run) if "python" in p.name()])
    for proc in victims:
        proc.send_signal(signal.SIGKILL)
    poll_until(lambda: settled_by_reaper(run), every_s=1.0)
    assert run.status == RunStatus.FAILED, (run.status, run.message)
    assert "exited with code 137" in run.message or "disappeared" in run.message
    assert not trainer_processes(run)


@pytest.fixture
def ray_env(ray_head: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RAY_ADDRESS", ray_head.address)
    settings.RAY_ADDRESS = ray_head.address
    return ray_head


def ray_status(run: Run, ray_head: Any) -> JobStatus:
    return JobSubmissionClient(ray_head.address).get_job_status(submission_id(run))


def test_a_ray_run_trains_through_the_jobs_api(
    personas: Any, arithmetic: Any, launch_env: Any, ray_env: Any, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, tiny_config(arithmetic, executor="ray"))
    poll_until(lambda: settled_by_reaper(run), every_s=1.0)
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.executor_ref == f"ray:{submission_id(run)}"

    assert MetricPoint.objects.filter(run=run, key__name="reward/mean").count() == 2
    assert (
        poll_until(lambda: ray_status(run, ray_env).is_terminal() and ray_status(run, ray_env))
        == JobStatus.SUCCEEDED
    )


def test_cancelling_a_ray_run_stops_the_job(
    personas: Any, arithmetic: Any, launch_env: Any, ray_env: Any, start_worker: Any
) -> None:
    start_worker()
    run = launch(personas, tiny_config(arithmetic, executor="ray", steps=10_000))
    poll_until(lambda: Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).exists())
    run.refresh_from_db()
    assert run.request_cancel()
    services.stop_executor(run)
    poll_until(lambda: settled_by_reaper(run), every_s=1.0)
    assert run.status == RunStatus.CANCELLED, run.message
    assert (
        poll_until(lambda: ray_status(run, ray_env).is_terminal() and ray_status(run, ray_env))
        == JobStatus.STOPPED
    )


def test_submitting_the_same_run_twice_starts_one_job(
    personas: Any, arithmetic: Any, ray_env: Any, tmp_path: Path
) -> None:
    config = tiny_config(arithmetic, executor="ray")
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    run = Run.objects.create(
        experiment=experiment, team=experiment.team, seed=1, executor="ray", config=experiment.config
    )
    executor = EXECUTORS.get("ray")
    first = executor.start(run, run.issue_token())
    second = executor.start(run, run.issue_token())
    assert first == second == f"ray:{submission_id(run)}"
    jobs = [
        job
        for job in JobSubmissionClient(ray_env.address).list_jobs()
        if job.submission_id == submission_id(run)
    ]
    assert len(jobs) == 1
    run.executor_ref = first
    executor.stop(run)


@pytest.mark.browser
def test_in_the_browser_a_grpo_experiment_is_created_launched_watched_and_cloned(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any, login: Any
) -> None:
    start_worker()
    page = login("alice")
    base = f"{launch_env.url}/t/{personas['acme'].slug}"
    page.goto(f"{base}/experiments/new/?task=arithmetic&preset=grpo")
    page.fill("#id_name", "browser grpo")
    page.select_option("#id_train_dataset", str(arithmetic["train"].pk))
    page.select_option("#id_model_choice", "tiny-test")
    page.wait_for_load_state("networkidle")  # the model's defaults refill the advanced fields first
    page.click("#advanced summary")
    for path, value in {"rollout.n": "2", "rollout.max_new_tokens": "8", "trainer.total_steps": "2",
                        "trainer.batch_size": "2", "optim.mini_batch_size": "4"}.items():  # fmt: skip
        page.fill(f"[name='{path}']", value)
    page.fill("[name='rollout.max_steps']", "2")
    page.check("#id_launch")
    page.click("#experiment-form button[type=submit]")
    page.wait_for_selector("text=Launched 1 run(s).")

    page.click("#runs a[href*='/runs/']")
    # The live section polls every 2 s and stops once the run is terminal.
    page.wait_for_function(
        "document.querySelector('#run-status').textContent.trim() === 'succeeded'", timeout=240_000
    )
    assert "status succeeded" in page.locator("#log").inner_text()

    page.click("text=← browser grpo")
    page.click("text=Clone")
    page.fill("#id_name", "browser grpo clone")
    page.click("#advanced summary")
    page.fill("[name='optim.lr']", "0.00003")
    page.uncheck("#id_launch")
    page.click("#experiment-form button[type=submit]")
    page.wait_for_selector("text=Differences from browser grpo")
    rows = {
        row.split("\t")[0]: row.split("\t")[1:]
        for row in page.locator("table.diff tbody tr").all_inner_texts()
    }
    assert set(rows) == {"name", "optim.lr"}, rows
    assert rows["name"] == ["browser grpo", "browser grpo clone"]
    assert [float(v) for v in rows["optim.lr"]] == [2e-5, 3e-5]  # a small model's default, then ours
