"""Where a run's training process lives: a detached local process group, a Ray job, or outside the
studio (runs reported by an MLflow client or imported).

Celery only launches, polls and stops; the training process owns its run. Each executor declares
what shared code asks of it and answers the reaper's questions: is it still there, how did it end,
how do I stop it, where is a start whose reference was never recorded, and what scratch space does
an ended run leave (docs/reliability.md). ``base`` is the contract; one module per executor.
"""

from __future__ import annotations

from webapp.experiments.executors.base import (
    EXECUTORS,
    WAITING_FOR_RESOURCES,
    Executor,
    ExecutorState,
    StartRefused,
    executor_of,
    job_for,
    launch_env,
    limited_executors,
    names_where,
    outside_executors,
    reaped_executors,
)
from webapp.experiments.executors.external import ExternalExecutor
from webapp.experiments.executors.local import LocalExecutor, run_dir
from webapp.experiments.executors.ray import ClusterTooSmall, RayExecutor, submission_id

# EXECUTORS holds Executor: mypy checks that each class implements the whole protocol.
EXECUTORS.add(LocalExecutor.name, LocalExecutor())
EXECUTORS.add(RayExecutor.name, RayExecutor())
EXECUTORS.add(ExternalExecutor.name, ExternalExecutor())

EXTERNAL_EXECUTOR = ExternalExecutor.name  # the executor the MLflow API and imports create runs with

__all__ = [
    "EXECUTORS",
    "EXTERNAL_EXECUTOR",
    "WAITING_FOR_RESOURCES",
    "ClusterTooSmall",
    "Executor",
    "ExecutorState",
    "ExternalExecutor",
    "LocalExecutor",
    "RayExecutor",
    "StartRefused",
    "executor_of",
    "job_for",
    "launch_env",
    "limited_executors",
    "names_where",
    "outside_executors",
    "reaped_executors",
    "run_dir",
    "submission_id",
]
