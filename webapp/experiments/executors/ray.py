"""The ray executor: the trainer as a Ray job on RAY_ADDRESS (docs/ray.md)."""

from __future__ import annotations

import hashlib
import logging
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db.models import Max

from trainer.backends import Job
from webapp.experiments import cluster
from webapp.experiments.executors.base import (
    WAITING_FOR_RESOURCES,
    ExecutorState,
    StartRefused,
    job_for,
    launch_env,
    runs_folder,
)

if TYPE_CHECKING:
    from webapp.experiments.models import Run

logger = logging.getLogger(__name__)
REF_PREFIX = "ray:"
ASKS = "asks"  # the job metadata key of what its entrypoint asks for ("2 CPU, 1 node_a")


def submission_id(run: Run) -> str:
    """Deterministic per run attempt (and per installation): Ray refuses a reused id, so retries of one
    start are safe, and a resumed run (docs/resume.md) is a new job with an id of its own."""
    install = hashlib.sha256(str(settings.SECRET_KEY).encode()).hexdigest()[:8]
    attempt = run.attempts.aggregate(last=Max("number"))["last"] or 1
    return f"studio-{install}-run-{run.pk}" + (f"-attempt-{attempt}" if attempt > 1 else "")


class ClusterTooSmall(StartRefused):
    """The precheck's refusal: the message says what the run needs and what the cluster has."""


def ray_job_options(job: Job, env: dict[str, str]) -> dict[str, Any]:
    """submit_job's runtime_env and entrypoint resources for the job (every process of a Ray job
    gets the job-level runtime_env, so the trainer and verl's workers share one claimant id)."""
    runtime_env: dict[str, Any] = {"env_vars": env, **job.runtime_env}
    options: dict[str, Any] = {"runtime_env": runtime_env, "entrypoint_num_cpus": job.num_cpus}
    if job.num_gpus:
        options["entrypoint_num_gpus"] = job.num_gpus
    if job.memory_bytes:
        options["entrypoint_memory"] = job.memory_bytes
    if job.resources:
        options["entrypoint_resources"] = dict(job.resources)
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
    limited_by_team = False  # the cluster places its jobs itself: a job waits PENDING for resources
    reaped = True

    def client(self) -> object:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.address())

    def address(self) -> str:
        if not settings.RAY_ADDRESS:
            raise RuntimeError(
                "RAY_ADDRESS is not set: the ray executor needs the Ray dashboard URL of a cluster"
            )
        return str(settings.RAY_ADDRESS)

    def files_dir(self, run: Run) -> Path:
        return runs_folder(Path(settings.SHARED_DIR), run)  # the job may run on any node: shared storage

    def planned_ref(self, run: Run) -> str:
        # Recorded before submitting: a launch that dies in between leaves a ref poll can answer for.
        return f"{REF_PREFIX}{submission_id(run)}"

    def start(self, run: Run, token: str) -> str:
        job = job_for(run, token)
        precheck(job, self.address())
        client = self.client()
        job_id = submission_id(run)
        entrypoint = " ".join(["python", *map(shlex.quote, job.argv)])
        try:
            client.submit_job(  # type: ignore[attr-defined]
                entrypoint=entrypoint,
                submission_id=job_id,
                metadata={
                    "studio_run": str(run.pk),
                    "experiment": run.experiment.name[:100],
                    ASKS: _asks(job),
                },
                **ray_job_options(job, launch_env(job)),
            )
        except RuntimeError as exc:
            # A retried launch: the job exists already, which is exactly what we wanted.
            if "already exists" not in str(exc):
                raise
            logger.info("ray job %s already submitted; not submitting again", job_id)
        return f"{REF_PREFIX}{job_id}"

    def poll(self, run: Run) -> ExecutorState:
        from ray.job_submission import JobStatus

        client = self.client()
        job_id = _job_id(run)
        try:
            info = client.get_job_info(job_id)  # type: ignore[attr-defined]
        except RuntimeError as exc:
            if "status code 404" not in str(exc):
                raise
            # The ref is planned before submitting: a launch that died in between submitted nothing.
            return ExecutorState(alive=False, started=False, message=f"ray job {job_id} was never submitted")
        if info.status == JobStatus.PENDING:
            return ExecutorState(alive=True, pending=True, message=f"{WAITING_FOR_RESOURCES} {_asked(info)}")
        node = run.node or self._node_seen(info)
        if info.status == JobStatus.RUNNING:
            return ExecutorState(alive=True, node=node)
        message = self._lost_node(run, info) or _ended(job_id, info)
        code = 0 if info.status == JobStatus.SUCCEEDED else getattr(info, "driver_exit_code", None)
        return ExecutorState(
            alive=False, exit_code=code, message=message, stopped=info.status == JobStatus.STOPPED, node=node
        )

    def _node_seen(self, info: Any) -> str:
        """The node the job's driver runs on, as the run page shows it ("" before it started)."""
        place = self._place(info)
        return place.describe() if place else ""

    def _place(self, info: Any) -> cluster.NodePlace | None:
        node_id = getattr(info, "driver_node_id", None)
        if not node_id:
            return None
        try:
            return cluster.node_place(self.address(), node_id)
        except Exception as exc:  # the state API is down: the next poll asks again
            logger.info("no node for ray job %s: %s", info.submission_id, exc)
            return None

    def _lost_node(self, run: Run, info: Any) -> str:
        """ "node N lost at step S" when the job failed because its driver's node died
        (docs/ray.md#a-lost-node): the run's reports up to step S and its checkpoints stay."""
        from ray.job_submission import JobStatus

        if info.status != JobStatus.FAILED:
            return ""
        place = self._place(info)
        if place is None or place.alive:
            return ""
        return f"node {place.name} lost at step {run.step}"

    def stop(self, run: Run, *, force: bool = False) -> None:
        client = self.client()
        job_id = _job_id(run)
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
        return self.planned_ref(run)  # deterministic: poll then says whether it was submitted

    def clean_up(self, run: Run) -> None:
        """Nothing here: a Ray job's scratch lives on its node, under Ray's own session folders."""

    def log_tail(self, run: Run, max_bytes: int) -> str:
        if not run.executor_ref:
            return ""
        try:
            logs = self.client().get_job_logs(_job_id(run))  # type: ignore[attr-defined]
        except Exception as exc:  # the cluster may be gone; the page still renders
            logger.info("no ray logs for run %s: %s", run.pk, exc)
            return ""
        return str(logs)[-max_bytes:]


def _ended(job_id: str, info: Any) -> str:
    return f"ray job {job_id} {info.status.value}" + (f": {info.message}" if info.message else "")


def _asks(job: Job) -> str:
    return cluster.asked_resources(job.num_cpus, job.num_gpus, job.memory_bytes, dict(job.resources))


def _asked(info: Any) -> str:
    """What a PENDING job waits for, as its submission wrote it down (Ray's job details do not say)."""
    return str((info.metadata or {}).get(ASKS) or "what the run's resources section asks")


def _job_id(run: Run) -> str:
    return run.executor_ref.removeprefix(REF_PREFIX)
