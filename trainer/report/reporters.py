"""Where the training loop sends what happens: the :class:`Reporter` interface and the reporters
that stay in the process.

:class:`ConsoleReporter` (logs, a progress bar on a terminal), :class:`JsonlReporter` (one JSON
object per line), :class:`MemoryReporter` (tests and notebooks) and :class:`MultiReporter`
(fan-out). The webapp's reporter is :class:`trainer.report.http.HttpReporter`. Reporters never
raise from ``log_*`` because a server is down: training must not fail because the webapp restarted.
"""

from __future__ import annotations

import json
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pydantic import BaseModel

from trainer.contract import (
    ACTOR_ENTROPY,
    ACTOR_KL,
    ACTOR_PG_LOSS,
    CRITIC_VALUE_LOSS,
    REWARD_MEAN,
    TIMING_ROLLOUT_S,
    VAL_PREFIX,
    CheckpointRecord,
    Heartbeat,
    RunStatus,
    StatusUpdate,
    StepSignalsWire,
    TokenSignalsBatch,
    TrajectoryBatch,
    TrajectoryWire,
    to_floats,
)
from trainer.mdp import Trajectory

logger = logging.getLogger(__name__)
console_logger = logging.getLogger("trainer.console")

# -- the interface --------------------------------------------------------------------------------


class Reporter(ABC):
    """Where the training loop sends what happens. All methods are called from the training thread."""

    @abstractmethod
    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    @abstractmethod
    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None: ...

    @abstractmethod
    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None: ...

    @abstractmethod
    def heartbeat(self, step: int, total: int) -> None: ...

    @abstractmethod
    def log_text(self, text: str) -> None: ...

    def log_checkpoint(
        self,
        step: int,
        path: str,
        metrics: Mapping[str, float] | None = None,
        *,
        size_bytes: int | None = None,
        deleted: bool = False,
    ) -> None:
        """A checkpoint saved at ``step`` (its size in bytes), or one the trainer ``deleted`` since.

        Every reporter records the same wire model (metrics made JSON-safe): it is built here once
        and handed to :meth:`record_checkpoint`."""
        record = CheckpointRecord(
            step=step,
            path=str(path),
            metrics=to_floats(metrics or {}),
            size_bytes=size_bytes,
            deleted=deleted,
        )
        self.record_checkpoint(record)

    @abstractmethod
    def record_checkpoint(self, record: CheckpointRecord) -> None:
        """Keep or send one checkpoint record (what :meth:`log_checkpoint` built)."""

    def log_token_signals(self, steps: Sequence[StepSignalsWire]) -> None:  # noqa: B027
        """Per-token signals of steps already reported with their trajectories (a backend whose update
        runs after the rollout was reported: verl). Reporters that keep no trajectories ignore them."""

    def settle(self) -> None:  # noqa: B027 - most reporters write as they are called
        """Deliver what was reported so far before going on: called before a resumable checkpoint is
        written, so that a resume from it supersedes only what came after it (docs/resume.md#superseded)."""

    def close(self) -> None:  # noqa: B027 - most reporters hold nothing to release
        """Flush and release; safe to call twice."""

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


CONSOLE_KEYS = (REWARD_MEAN, ACTOR_PG_LOSS, ACTOR_KL, ACTOR_ENTROPY, CRITIC_VALUE_LOSS, TIMING_ROLLOUT_S)


class ConsoleReporter(Reporter):
    """Logs a one-line summary per step (logger ``trainer.console``); a tqdm bar when ``progress``."""

    def __init__(self, *, progress: bool = False, keys: Sequence[str] = CONSOLE_KEYS) -> None:
        self.progress = progress
        self.keys = tuple(keys)
        self._bar: Any = None

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        values = to_floats(metrics)
        shown = [key for key in values if key in self.keys or key.startswith(VAL_PREFIX)]
        console_logger.info("step %d  %s", step, "  ".join(f"{key}={values[key]:.4g}" for key in shown))
        if self._bar is not None and REWARD_MEAN in values:
            self._bar.set_postfix(reward=f"{values[REWARD_MEAN]:.3f}", refresh=False)

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        console_logger.debug("step %d: %d trajectories", step, len(trajectories))

    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None:
        console_logger.info("status %s%s", status, f": {message}" if message else "")

    def heartbeat(self, step: int, total: int) -> None:
        if not self.progress:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="step", dynamic_ncols=True)
        self._bar.total = total
        self._bar.update(step - self._bar.n)

    def log_text(self, text: str) -> None:
        console_logger.info("%s", text.rstrip("\n"))

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        state = "deleted" if record.deleted else "saved"
        console_logger.info("checkpoint %s at step %d: %s", state, record.step, record.path)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class JsonlReporter(Reporter):
    """Appends one JSON object per event to a file: ``{"type": ..., "ts": ..., ...}``.

    Types: metrics (step, values), trajectories (step, trajectories as TrajectoryWire), token_signals
    (TokenSignalsBatch), status, heartbeat, log, checkpoint. Every line is flushed, so a crash loses nothing already logged.
    """

    def __init__(self, path: str | Path, *, include_token_ids: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.include_token_ids = include_token_ids
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def _write(self, kind: str, payload: BaseModel | Mapping[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError(f"JsonlReporter for {self.path} is closed")
        body = json.loads(payload.model_dump_json()) if isinstance(payload, BaseModel) else dict(payload)
        line = {"type": kind, "ts": time.time(), **body}
        self._file.write(json.dumps(line, ensure_ascii=False) + "\n")
        self._file.flush()

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self._write(
            "metrics", {"step": step, "values": {k: _json_float(v) for k, v in to_floats(metrics).items()}}
        )

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        wire = [
            TrajectoryWire.from_trajectory(t, include_token_ids=self.include_token_ids) for t in trajectories
        ]
        self._write("trajectories", TrajectoryBatch(training_step=step, trajectories=wire))

    def log_token_signals(self, steps: Sequence[StepSignalsWire]) -> None:
        self._write("token_signals", TokenSignalsBatch(steps=list(steps)))

    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None:
        self._write("status", StatusUpdate(status=status, message=message, progress=progress))

    def heartbeat(self, step: int, total: int) -> None:
        self._write("heartbeat", Heartbeat(step=step, total_steps=total, ts=time.time()))

    def log_text(self, text: str) -> None:
        self._write("log", {"text": text})

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        self._write("checkpoint", record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _json_float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The events a :class:`JsonlReporter` wrote, in order."""
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@dataclass
class MemoryReporter(Reporter):
    """Keeps every event in lists (for tests and notebooks)."""

    metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    trajectories: list[tuple[int, list[Trajectory]]] = field(default_factory=list)
    token_signals: list[list[StepSignalsWire]] = field(default_factory=list)
    statuses: list[tuple[str, str, float | None]] = field(default_factory=list)
    heartbeats: list[tuple[int, int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    checkpoints: list[tuple[int, str, Mapping[str, float | None]]] = field(default_factory=list)  # saved ones
    checkpoint_records: list[CheckpointRecord] = field(default_factory=list)  # saved and deleted
    closed: bool = False

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.metrics.append((step, to_floats(metrics)))

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        self.trajectories.append((step, list(trajectories)))

    def log_token_signals(self, steps: Sequence[StepSignalsWire]) -> None:
        self.token_signals.append(list(steps))

    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None:
        self.statuses.append((status, message, progress))

    def heartbeat(self, step: int, total: int) -> None:
        self.heartbeats.append((step, total))

    def log_text(self, text: str) -> None:
        self.texts.append(text)

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        self.checkpoint_records.append(record)
        if not record.deleted:
            self.checkpoints.append((record.step, record.path, record.metrics))

    def close(self) -> None:
        self.closed = True

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of one metric key, in logging order."""
        return [(step, values[key]) for step, values in self.metrics if key in values]


class MultiReporter(Reporter):
    """Sends every event to each reporter in turn."""

    def __init__(self, reporters: Iterable[Reporter]) -> None:
        self.reporters = list(reporters)

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for reporter in self.reporters:
            reporter.log_metrics(step, metrics)

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        for reporter in self.reporters:
            reporter.log_trajectories(step, trajectories)

    def log_token_signals(self, steps: Sequence[StepSignalsWire]) -> None:
        for reporter in self.reporters:
            reporter.log_token_signals(steps)

    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None:
        for reporter in self.reporters:
            reporter.set_status(status, message, progress)

    def heartbeat(self, step: int, total: int) -> None:
        for reporter in self.reporters:
            reporter.heartbeat(step, total)

    def log_text(self, text: str) -> None:
        for reporter in self.reporters:
            reporter.log_text(text)

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        for reporter in self.reporters:
            reporter.record_checkpoint(record)

    def settle(self) -> None:
        for reporter in self.reporters:
            reporter.settle()

    def close(self) -> None:
        # Close every reporter even when one fails, so the HTTP reporter still flushes.
        errors: list[BaseException] = []
        for reporter in self.reporters:
            try:
                reporter.close()
            except Exception as error:
                logger.exception("closing %s failed", type(reporter).__name__)
                errors.append(error)
        if errors:
            raise errors[0]
