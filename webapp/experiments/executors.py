"""Where a run's training process lives: a detached local process group, or a Ray job.

Celery only launches, polls and stops; the training process owns its run. Each executor answers
three questions for the reaper: is it still there, how did it end, and how do I stop it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil
from django.conf import settings

from trainer.config import RunConfig
from trainer.contract import (
    API_ENV,
    MLFLOW_ROOT,
    MLFLOW_RUN_ID_ENV,
    MLFLOW_TRACKING_TOKEN_ENV,
    MLFLOW_TRACKING_URI_ENV,
    PROJECT_ENV,
    RUN_ID_ENV,
    TOKEN_ENV,
)
from trainer.registry import Registry
from webapp.experiments import cluster
from webapp.experiments.models import Run

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ExecutorState:
    """``alive`` while the process/job may still report; otherwise ``exit_code`` / ``message`` say how it ended."""

    alive: bool
    exit_code: int | None = None
    message: str = ""
    stopped: bool = False  # ended because someone stopped it
    pending: bool = False  # alive but not started: a Ray job still waiting for its entrypoint's resources


class Executor(Protocol):
    name: str

    def start(self, run: Run, token: str) -> str: ...
    def poll(self, run: Run) -> ExecutorState: ...
    def stop(self, run: Run, *, force: bool = False) -> None: ...


EXECUTORS: Registry[Executor] = Registry("executor")


# torch's idle OpenMP threads spin by default; on a machine shared with the web server and other
# runs that stalls generation many times over (measured: 40-60 s instead of 3.5 s for 4x32 tokens).
TRAINER_ENV = {"PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def trainer_argv(run: Run) -> list[str]:
    return ["-m", "trainer", "run", "--run-id", str(run.pk), "--api", str(settings.PUBLIC_URL)]


def run_dir(run: Run) -> Path:
    path = Path(settings.VAR_DIR) / "runs" / str(run.pk)
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- local ---------------------------------------------------------------------------------------


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


class LocalExecutor:
    """A detached process group on this machine: ``sh -c 'python -m trainer ...; echo $? > exit_code'``.

    The shell wrapper records the trainer's exit status (the worker that started it is not its
    parent for long: the launch helper exits at once, so init reaps it and no zombie is left).
    """

    name = "local"

    def start(self, run: Run, token: str) -> str:
        directory = run_dir(run)
        exit_file = directory / "exit_code"
        exit_file.unlink(missing_ok=True)
        command = " ".join([_quote(sys.executable), *map(_quote, trainer_argv(run))])
        script = (
            f"{command} >> {_quote(str(directory / 'train.log'))} 2>&1; echo $? > {_quote(str(exit_file))}"
        )
        env = {**os.environ, **TRAINER_ENV, TOKEN_ENV: token}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # the trainer never imports Django
        # Double fork through a helper that exits at once: the trainer outlives this worker.
        helper = subprocess.run(
            [sys.executable, "-m", "webapp.experiments.detach", "sh", "-c", script],
            env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        pgid = int(helper.stdout.strip())
        logger.info("run %s started locally as process group %s", run.pk, pgid)
        return f"pgid:{pgid}"

    def poll(self, run: Run) -> ExecutorState:
        pgid = _pgid(run)
        if pgid is None:
            return ExecutorState(alive=False, message="no process was recorded for this run")
        if _group_members(pgid):
            return ExecutorState(alive=True)
        exit_file = run_dir(run) / "exit_code"
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or -1)
            return ExecutorState(
                alive=False, exit_code=code, message=f"the training process exited with code {code}"
            )
        return ExecutorState(
            alive=False, message="the training process disappeared (killed?) without an exit code"
        )

    def stop(self, run: Run, *, force: bool = False) -> None:
        pgid = _pgid(run)
        if pgid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL if force else signal.SIGTERM)


def _pgid(run: Run) -> int | None:
    if not run.executor_ref.startswith("pgid:"):
        return None
    return int(run.executor_ref.removeprefix("pgid:"))


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --- ray -----------------------------------------------------------------------------------------


def submission_id(run: Run) -> str:
    """Deterministic per run (and per installation): Ray refuses a reused id, so retries are safe."""
    install = hashlib.sha256(str(settings.SECRET_KEY).encode()).hexdigest()[:8]
    return f"studio-{install}-run-{run.pk}"


class ClusterTooSmall(RuntimeError):
    """The precheck's refusal: the message says what the run needs and what the cluster has."""


# verl's TaskRunner (where trainer.logger=[console,mlflow] runs) and every other worker of the job
# import our estimators and agent loop through this hook; metrics leave through MLflow's client.
VERL_SETUP_HOOK = "trainer.backends.verl.setup_hook.setup_worker"


def ray_env_vars(run: Run, token: str) -> dict[str, str]:
    """The job's environment: every process of the job gets it (Ray's job-level runtime_env).

    verl's workers run our agent loop, which reports trajectories to this run; verl's own metrics
    reach the run through the MLflow-compatible endpoint with the same per-run token.
    """
    env = {**TRAINER_ENV, TOKEN_ENV: token}
    if run.config.get("backend") != "verl":
        return env
    api = str(settings.PUBLIC_URL).rstrip("/")
    env |= {
        RUN_ID_ENV: str(run.pk),
        API_ENV: api,
        PROJECT_ENV: run.experiment.name,  # verl's trainer.project_name
        MLFLOW_TRACKING_URI_ENV: api + MLFLOW_ROOT,
        MLFLOW_TRACKING_TOKEN_ENV: token,
        # verl's Tracking attaches to this run instead of creating one (verl/utils/tracking.py).
        MLFLOW_RUN_ID_ENV: run.mlflow_run_id,
    }
    return env


def ray_job_options(run: Run, token: str) -> dict[str, Any]:
    """submit_job's runtime_env and entrypoint resources for this run."""
    resources = run.config.get("resources") or {}
    runtime_env: dict[str, Any] = {"env_vars": ray_env_vars(run, token)}
    options: dict[str, Any] = {"entrypoint_num_cpus": resources.get("cpus", 1)}
    if run.config.get("backend") == "verl":
        # The driver only supervises verl's main_ppo; verl's placement groups take the GPUs.
        runtime_env["worker_process_setup_hook"] = VERL_SETUP_HOOK
    elif resources.get("gpus_per_node"):
        options["entrypoint_num_gpus"] = resources["gpus_per_node"]  # the torch backend trains in the driver
    return {"runtime_env": runtime_env, **options}


def precheck_verl(run: Run, address: str) -> None:
    """Refuse (ClusterTooSmall) a verl run the cluster cannot hold, before anything is submitted."""
    if run.config.get("backend") != "verl" or not settings.VERL_PRECHECK:
        return
    config = RunConfig.model_validate(run.config)
    problem = cluster.shortfall(cluster.verl_needs(config), cluster.cluster_nodes(address))
    if problem:
        raise ClusterTooSmall(problem)


class RayExecutor:
    name = "ray"

    def client(self) -> object:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address())

    def address(self) -> str:
        if not settings.RAY_ADDRESS:
            raise RuntimeError(
                "RAY_ADDRESS is not set: the ray executor needs the Ray dashboard URL of a cluster"
            )
        return str(settings.RAY_ADDRESS)

    def start(self, run: Run, token: str) -> str:
        precheck_verl(run, self.address())
        client = self.client()
        job_id = submission_id(run)
        entrypoint = " ".join(["python", *map(_quote, trainer_argv(run))])
        try:
            client.submit_job(  # type: ignore[attr-defined]
                entrypoint=entrypoint,
                submission_id=job_id,
                metadata={"studio_run": str(run.pk), "experiment": run.experiment.name[:100]},
                **ray_job_options(run, token),
            )
        except RuntimeError as exc:
            # A retried launch: the job exists already, which is exactly what we wanted.
            if "already exists" not in str(exc):
                raise
            logger.info("ray job %s already submitted; not submitting again", job_id)
        return f"ray:{job_id}"

    def poll(self, run: Run) -> ExecutorState:
        from ray.job_submission import JobStatus

        client = self.client()
        job_id = run.executor_ref.removeprefix("ray:")
        info = client.get_job_info(job_id)  # type: ignore[attr-defined]
        if info.status in (JobStatus.PENDING, JobStatus.RUNNING):
            return ExecutorState(alive=True, pending=info.status == JobStatus.PENDING)
        message = f"ray job {job_id} {info.status.value}"
        if info.message:
            message += f": {info.message}"
        code = 0 if info.status == JobStatus.SUCCEEDED else getattr(info, "driver_exit_code", None)
        return ExecutorState(
            alive=False, exit_code=code, message=message, stopped=info.status == JobStatus.STOPPED
        )

    def stop(self, run: Run, *, force: bool = False) -> None:
        client = self.client()
        job_id = run.executor_ref.removeprefix("ray:")
        if not job_id:
            return
        try:
            if client.get_job_status(job_id).is_terminal():  # type: ignore[attr-defined]
                return
            client.stop_job(job_id)  # type: ignore[attr-defined]
        except RuntimeError as exc:
            # The job ended (or was never submitted) between our look and the stop: nothing to stop.
            if "404" not in str(exc):
                raise


EXECUTORS.add("local", LocalExecutor())
EXECUTORS.add("ray", RayExecutor())
