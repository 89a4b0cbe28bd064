"""What a training backend declares: the :class:`Backend` protocol and what a launch needs (:class:`Job`).

Shared code never asks "is this verl?". It asks the run's backend (``BACKENDS.get(config.backend)``)
what it refuses in a config, what launching it takes and how its library spells our metric keys, the
way Django's ORM asks ``connection.features`` and ``connection.ops``. A backend lists only its
refusals, each with the message that says what to set instead; it honours every other RunConfig field
(:func:`trainer.config.honoured_fields`).

This module sits beside the config at the trainer's floor (docs/architecture.md#inside-the-trainer):
it imports neither torch nor verl nor the config, and RunConfig's validation asks :data:`BACKENDS`.
The backends themselves live in :mod:`trainer.backends`, which registers them here; the ``trainer``
package's ``__init__`` imports it first, so no code of the trainer sees the registry empty. Only
:meth:`Backend.train` and :meth:`Backend.check` import the backend's libraries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from trainer.registry import Registry

if TYPE_CHECKING:
    import threading

    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

Problem = tuple[str, str]  # (RunConfig field path, message saying what to set)


@dataclass(frozen=True)
class LaunchEnv:
    """The launched run as its launcher knows it: what a backend may pass on to the job."""

    run_id: str
    api_url: str  # the web app's base URL as the trainer reaches it
    token: str  # the run's own API token
    project: str = ""  # the experiment's name
    mlflow_run_id: str = ""  # the run's id on the web app's MLflow-compatible endpoint


@dataclass(frozen=True)
class ClusterNeeds:
    """What a run reserves on a Ray cluster: the launcher compares it with the cluster before submitting."""

    nodes: int
    gpus_per_node: int
    cpus_per_node: int  # reserved on each of those nodes
    cpus_by_use: Mapping[str, int]  # the whole cluster's CPUs, by what holds them

    @property
    def cpus(self) -> int:
        return sum(self.cpus_by_use.values())

    def describe(self) -> str:
        uses = ", ".join(f"{count} for {use}" for use, count in self.cpus_by_use.items())
        return (
            f"{self.nodes} node(s) with {self.gpus_per_node} GPU(s) and {self.cpus_per_node} CPUs each, "
            f"and {self.cpus} CPUs in all ({uses})"
        )


@dataclass(frozen=True)
class Job:
    """What launching one run takes, whichever executor (local process or Ray job) starts it."""

    argv: tuple[str, ...]  # the trainer's command line after the Python interpreter
    env: Mapping[str, str]  # added to the process's (or the Ray job's) environment
    num_cpus: float  # Ray's entrypoint_num_cpus: what the entrypoint itself holds
    num_gpus: float = 0  # Ray's entrypoint_num_gpus (0: the entrypoint needs no GPU of its own)
    memory_bytes: int = 0  # Ray's entrypoint_memory (0: none asked)
    resources: Mapping[str, float] = field(
        default_factory=dict
    )  # Ray's entrypoint_resources ("where to run")
    runtime_env: Mapping[str, Any] = field(default_factory=dict)  # Ray runtime_env fields beside env_vars
    needs: ClusterNeeds | None = None  # checked against the cluster before submitting; None: no precheck
    stall_hint: str = ""  # what a live run that makes no progress is probably waiting for


def entrypoint_placement(config: RunConfig) -> dict[str, Any]:
    """Job's memory and "where to run" resources: what the entrypoint asks of the node it lands on
    beyond CPUs and GPUs, so that Ray places it (docs/ray.md#several-nodes)."""
    return {
        "memory_bytes": int(config.resources.memory_gb * 2**30),
        "resources": dict(config.resources.where),
    }


def trainer_argv(env: LaunchEnv) -> tuple[str, ...]:
    """``python -m trainer run --run-id N --api URL``, without the interpreter (local and Ray differ)."""
    return ("-m", "trainer", "run", "--run-id", env.run_id, "--api", env.api_url)


@dataclass(frozen=True)
class ResumePoint:
    """Where a run that ended would continue (docs/resume.md#what-is-resumed): the step of its newest
    complete checkpoint that holds the optimiser state, or why it cannot continue (``refusal``)."""

    step: int | None = None
    refusal: str = ""


NOT_RESUMABLE = (
    "its checkpoints hold the weights only (the run did not set trainer.resume), and weights alone cannot "
    "resume the optimiser state: fork a new run from a checkpoint instead"
)


class Backend(Protocol):
    """A training backend. It refuses what it cannot honour and honours every other RunConfig field."""

    name: str
    description: str
    # Fields this backend has no setting for, with the message that says what to set instead: a value
    # other than RunConfig's default is refused. A field it acts on only for some values is not here
    # but in :meth:`problems`.
    refused: Mapping[str, str]

    def train(
        self, config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
    ) -> Any:
        """Train ``config`` to the end or until ``stop_event``; the result may carry a ``status``."""

    def problems(self, config: RunConfig) -> list[Problem]:
        """The values of fields it honours that it cannot take here (a bound, a combination). Pure and
        cheap: RunConfig's validation calls it, after checking :attr:`refused`."""

    def check(self, config: RunConfig) -> list[Problem]:
        """The backend's own deeper check of a valid config (it may import the backend's libraries and
        raise ImportError where they are missing); [] when the backend accepts it."""

    def job(self, config: RunConfig, env: LaunchEnv) -> Job:
        """What launching ``config`` as the run ``env`` describes takes."""

    def resume_point(self, config: RunConfig) -> ResumePoint:
        """Where the run of ``config`` would continue from its own checkpoint folder
        (trainer.checkpoint_dir), reading the folder only."""

    def canonical_key(self, key: str) -> str | None:
        """Our name (trainer.contract's keys) for a metric key the backend's library logs under its own
        name; None for every other key."""


BACKENDS: Registry[Backend] = Registry("backend")


def canonical_key(key: str) -> str | None:
    """Our name for a metric key some registered backend's library spells its own way, else None:
    ingestion stores such a point under both (docs/contract.md#the-verl-alias-table)."""
    for name in BACKENDS.names():
        ours = BACKENDS.get(name).canonical_key(key)
        if ours is not None:
            return ours
    return None
