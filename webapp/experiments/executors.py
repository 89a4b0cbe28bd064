"""Where a run's training process lives: a detached local process group, or a Ray job.

Celery only launches, polls and stops; the training process owns its run. Each executor answers
the reaper's questions: is it still there, how did it end, how do I stop it, where is a start whose
reference was never recorded, and what scratch space does an ended run leave (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil
from django.conf import settings

from trainer.backends import BACKENDS, Job, LaunchEnv
from trainer.config import RunConfig
from trainer.contract import CLAIMANT_ENV, new_claimant_id
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
    started: bool = True  # False: the executor never got the run (its launch died before handing it over)


class Executor(Protocol):
    name: str

    def start(self, run: Run, token: str) -> str: ...
    def poll(self, run: Run) -> ExecutorState: ...
    def stop(self, run: Run, *, force: bool = False) -> None: ...
    def locate(self, run: Run) -> str:
        """The ref of a start that was never recorded, when this executor has it; "" otherwise."""
        ...

    def clean_up(self, run: Run) -> None:
        """Remove what an ended run leaves behind that nobody reads (its dataset copy, temp files)."""
        ...


EXECUTORS: Registry[Executor] = Registry("executor")


# torch's OpenMP threads keep their default spin: the torch backend lowers its thread count while
# the machine is busy, which is what made spinning threads stall (docs/performance.md#cpu-threads).
TRAINER_ENV = {"PYTHONUNBUFFERED": "1"}


def launch_env(job: Job) -> dict[str, str]:
    """What every process of one start of the run gets on top of the backend's job env: a fresh
    claimant id, so a second start's processes cannot change a run the first one claimed."""
    return {**TRAINER_ENV, **job.env, CLAIMANT_ENV: new_claimant_id()}


def job_for(run: Run, token: str = "") -> Job:
    """What the run's backend says launching it takes. ``token`` is the run's fresh API token when
    launching; the stall hint and the precheck need none."""
    config = RunConfig.model_validate(run.config)
    env = LaunchEnv(
        run_id=str(run.pk),
        api_url=str(settings.PUBLIC_URL),
        token=token,
        project=run.experiment.name,
        mlflow_run_id=run.mlflow_run_id,
    )
    return BACKENDS.get(config.backend).job(config, env)


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

    The shell wrapper first writes its process group id to ``pgid`` (so a start whose worker died
    before recording it can still be found), runs the trainer with its temporary files under
    ``tmp/``, removes them and records the trainer's exit status (the worker that started it is not
    its parent for long: the launch helper exits at once, so init reaps it and no zombie is left).
    """

    name = "local"

    def start(self, run: Run, token: str) -> str:
        directory = run_dir(run)
        exit_file, pgid_file, scratch = directory / "exit_code", directory / "pgid", directory / "tmp"
        exit_file.unlink(missing_ok=True)
        pgid_file.unlink(missing_ok=True)
        scratch.mkdir(exist_ok=True)
        job = job_for(run, token)
        command = " ".join([_quote(sys.executable), *map(_quote, job.argv)])
        paths = {"exit": exit_file, "pgid": pgid_file, "tmp": scratch, "log": directory / "train.log"}
        q = {name: _quote(str(path)) for name, path in paths.items()}
        script = (
            f"echo $$ > {q['pgid']}.part && mv {q['pgid']}.part {q['pgid']}; {command} >> {q['log']} 2>&1; "
            f"code=$?; rm -rf {q['tmp']}; echo $code > {q['exit']}"
        )
        # TMPDIR: the trainer's dataset copy and report spool land in the run's scratch folder,
        # which the wrapper (or the reaper, when the whole group was killed) removes.
        env = {**os.environ, **launch_env(job), "TMPDIR": str(scratch)}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # the trainer never imports Django
        # Double fork through a helper that exits at once: the trainer outlives this worker.
        helper = subprocess.run(
            [sys.executable, "-m", "webapp.experiments.detach", "sh", "-c", script],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        pgid = int(helper.stdout.strip())
        logger.info("run %s started locally as process group %s", run.pk, pgid)
        return f"pgid:{pgid}"

    def poll(self, run: Run) -> ExecutorState:
        pgid = _pgid(run)
        if pgid is None:
            return ExecutorState(alive=False, started=False, message="no process was recorded for this run")
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

    def locate(self, run: Run) -> str:
        try:
            return f"pgid:{int((run_dir(run) / 'pgid').read_text().strip())}"
        except (OSError, ValueError):
            return ""

    def clean_up(self, run: Run) -> None:
        shutil.rmtree(run_dir(run) / "tmp", ignore_errors=True)


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


def ray_job_options(job: Job, env: dict[str, str]) -> dict[str, Any]:
    """submit_job's runtime_env and entrypoint resources for the job (every process of a Ray job
    gets the job-level runtime_env, so the trainer and verl's workers share one claimant id)."""
    runtime_env: dict[str, Any] = {"env_vars": env, **job.runtime_env}
    options: dict[str, Any] = {"runtime_env": runtime_env, "entrypoint_num_cpus": job.num_cpus}
    if job.num_gpus:
        options["entrypoint_num_gpus"] = job.num_gpus
    return options


def precheck(job: Job, address: str) -> None:
    """Refuse (ClusterTooSmall) a job whose backend declares needs the cluster cannot hold, before
    anything is submitted (webapp/experiments/cluster.py says why)."""
    if job.needs is None or not settings.VERL_PRECHECK:
        return
    problem = cluster.shortfall(job.needs, cluster.cluster_nodes(address))
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
        job = job_for(run, token)
        precheck(job, self.address())
        client = self.client()
        job_id = submission_id(run)
        entrypoint = " ".join(["python", *map(_quote, job.argv)])
        try:
            client.submit_job(  # type: ignore[attr-defined]
                entrypoint=entrypoint,
                submission_id=job_id,
                metadata={"studio_run": str(run.pk), "experiment": run.experiment.name[:100]},
                **ray_job_options(job, launch_env(job)),
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
        try:
            info = client.get_job_info(job_id)  # type: ignore[attr-defined]
        except RuntimeError as exc:
            if "status code 404" not in str(exc):
                raise
            # The ref is planned before submitting: a launch that died in between submitted nothing.
            return ExecutorState(alive=False, started=False, message=f"ray job {job_id} was never submitted")
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

    def locate(self, run: Run) -> str:
        return f"ray:{submission_id(run)}"  # deterministic: poll then says whether it was submitted

    def clean_up(self, run: Run) -> None:
        """Nothing here: a Ray job's scratch lives on its node, under Ray's own session folders."""


EXECUTORS.add("local", LocalExecutor())
EXECUTORS.add("ray", RayExecutor())
