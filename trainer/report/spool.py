"""The spool: a run's reports as files on disk, one gzipped batch per file, in delivery order
(docs/sdk.md#the-run-folder). One format for every writer and reader: the trainer's HTTP reporter
spools here before it sends, the ``studio`` SDK spools here online and offline, and ``studio sync``
delivers what a folder holds.

A file is ``<seq>.<kind>.<batch_id>.json.gz``: the zero-padded sequence number makes name order
delivery order, the kind names the ingestion path, and the batch id is the idempotency key the
server deduplicates by (docs/contract.md#idempotency), so a file delivered twice is stored once.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
from pydantic import ValidationError

from trainer.contract import wire
from trainer.contract.limits import INT4_MAX
from trainer.contract.paths import (
    CHECKPOINTS_PATH,
    IDEMPOTENCY_HEADER,
    LOGS_PATH,
    METRICS_PATH,
    STATUS_PATH,
    TOKEN_SIGNALS_PATH,
    TRAJECTORIES_PATH,
)
from trainer.mdp import Trajectory
from trainer.report.reporters import Reporter
from trainer.report.retry import raise_for_status

logger = logging.getLogger(__name__)

SPOOL_NAME = re.compile(r"^(\d{12})\.([a-z]+)\.([0-9a-f]+)\.json\.gz$")
KIND_PATHS = {
    "metrics": METRICS_PATH,
    "trajectories": TRAJECTORIES_PATH,
    "status": STATUS_PATH,
    "logs": LOGS_PATH,
    "checkpoints": CHECKPOINTS_PATH,
    "signals": TOKEN_SIGNALS_PATH,
}
REJECTED = "rejected"  # the subfolder of batches the server refused (docs/security.md#refusals)
SpoolBody = (
    wire.TrajectoryBatch | wire.TokenSignalsBatch | wire.StatusUpdate | wire.LogChunk | wire.CheckpointRecord
)
Point = tuple[str, int, float, float]  # key, step, value, ts: a MetricPoint not yet spooled


def json_number(value: float) -> str:
    """A float as the wire writes it: NaN and the infinities as strings (trainer.contract.Wire)."""
    if math.isfinite(value):
        return repr(value)
    return '"NaN"' if value != value else '"Infinity"' if value > 0 else '"-Infinity"'


def metric_batch_json(batch_id: str, points: list[Point], keys: dict[str, str]) -> str:
    """MetricBatch(batch_id, points).model_dump_json(), written directly: the SDK's log() of a million
    points spends most of its time here, and pydantic's model per point is six times slower
    (docs/sdk.md#throughput). ``keys``: each key's JSON text, a cache the caller keeps."""
    rows = ",".join(
        f'{{"key":{keys.get(key) or keys.setdefault(key, json.dumps(key))},"step":{step},'
        f'"value":{json_number(value)},"ts":{json_number(ts)}}}'
        for key, step, value, ts in points
    )
    return f'{{"batch_id":"{batch_id}","points":[{rows}]}}'


def spool_files(folder: Path) -> list[Path]:
    """The batches waiting in ``folder``, in delivery order."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and SPOOL_NAME.match(p.name))


def deliver_file(client: httpx.Client, run_id: int | str, path: Path) -> None:
    """POST one spooled batch to its ingestion path, then delete it. RetryableHttpError or an
    httpx error: try again later; PermanentHttpError: the server refuses it (see :func:`reject`)."""
    match = SPOOL_NAME.match(path.name)
    if match is None:
        raise ValueError(f"not a spool file: {path}")
    kind, batch_id = match.group(2), match.group(3)
    response = client.post(
        KIND_PATHS[kind].format(run_id=run_id),
        content=path.read_bytes(),
        headers={
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            IDEMPOTENCY_HEADER: batch_id,
        },
    )
    raise_for_status(response)
    path.unlink(missing_ok=True)


def reject(path: Path) -> Path:
    """Move a refused batch aside, so the batches after it flow on; where it now lies."""
    rejected = path.parent / REJECTED
    rejected.mkdir(exist_ok=True)
    os.replace(path, rejected / path.name)
    return rejected / path.name


class SpoolingReporter(Reporter):
    """A reporter that writes every batch to ``spool_dir`` and nothing else: metric points and log
    lines wait in memory until ``max_batch_points`` / ``max_log_chars`` (or :meth:`cut`), every other
    record is a batch of its own, cut after what was logged before it. Memory stays bounded: what
    waits to be sent waits on disk. :class:`~trainer.report.http.HttpReporter` adds the sender."""

    def __init__(
        self,
        spool_dir: str | Path,
        *,
        max_batch_points: int = 1000,
        max_log_chars: int = 64_000,
        max_trajectories_per_batch: int = 32,
        include_token_ids: bool = False,
        max_wait_s: float | None = None,
    ) -> None:
        self.spool_dir = Path(spool_dir)
        self.rejected_dir = self.spool_dir / REJECTED
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.max_batch_points = max_batch_points
        self.max_log_chars = max_log_chars
        self.max_trajectories_per_batch = max_trajectories_per_batch
        self.include_token_ids = include_token_ids
        # With no sender thread to cut on a timer (offline), a log call cuts what has waited this long.
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self.rejected = 0  # batches the server refused (4xx) and trajectories the contract refused
        self._points: list[Point] = []
        self._checked_keys: set[str] = set()  # keys the contract accepts
        self._key_json: dict[str, str] = {}
        self._log_parts: list[str] = []
        self._buffered_since: float | None = None  # monotonic time of the oldest unspooled point or line
        self._log_chars = 0
        self._seq = self._next_seq_on_disk()
        self._log_seq = 0

    def _spooled(self) -> None:
        """Called after a batch is written by a call that wants it sent soon (the sender's wake-up)."""

    # -- producer side (training thread) --

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """ValidationError, at once, for a point the server would refuse (a key too long, a step < 0)."""
        now = time.time()
        values = wire.to_floats(metrics)
        if not 0 <= step <= INT4_MAX or not values.keys() <= self._checked_keys:
            for key, value in values.items():
                wire.MetricPoint(key=key, step=step, value=value, ts=now)
            self._checked_keys.update(values)
        points = [(key, step, value, now) for key, value in values.items()]
        with self._lock:
            self._points.extend(points)
            self._mark_buffered_locked()
            full = len(self._points) >= self.max_batch_points
            if full:
                self._cut_metrics_locked()
            elif self._waited_too_long_locked():
                self._cut_all_locked()
        if full:
            self._spooled()

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        self.log_wires(step, [w for w in (self._wire(t) for t in trajectories) if w is not None])

    def log_wires(self, step: int, wires: Sequence[wire.TrajectoryWire]) -> None:
        """Trajectories already in their wire shape (the SDK builds them so)."""
        size = self.max_trajectories_per_batch
        with self._lock:
            self._cut_all_locked()
            for start in range(0, len(wires), size):
                self._spool_locked(
                    "trajectories",
                    wire.TrajectoryBatch(training_step=step, trajectories=list(wires[start : start + size])),
                )
        self._spooled()

    def log_token_signals(self, steps: Sequence[wire.StepSignalsWire]) -> None:
        size = self.max_trajectories_per_batch
        with self._lock:
            self._cut_all_locked()
            for start in range(0, len(steps), size):
                self._spool_locked("signals", wire.TokenSignalsBatch(steps=list(steps[start : start + size])))
        self._spooled()

    def _wire(self, trajectory: Trajectory) -> wire.TrajectoryWire | None:
        try:
            return wire.TrajectoryWire.from_trajectory(trajectory, include_token_ids=self.include_token_ids)
        except ValidationError as error:
            # The server would refuse it too: one trajectory lost, logged, never the whole batch.
            self.rejected += 1
            logger.error("trajectory %s cannot be reported and is dropped: %s", trajectory.id, error)
            return None

    def set_status(self, status: wire.RunStatus, message: str = "", progress: float | None = None) -> None:
        with self._lock:
            self._cut_all_locked()  # a status follows the metrics logged before it
            self._spool_locked("status", wire.StatusUpdate(status=status, message=message, progress=progress))
        self._spooled()

    def heartbeat(self, step: int, total: int) -> None:
        """Not spooled: only the latest one matters, and only to a live server (the sender's)."""

    def log_text(self, text: str) -> None:
        with self._lock:
            self._log_parts.append(text)
            self._log_chars += len(text)
            self._mark_buffered_locked()
            full = self._log_chars >= self.max_log_chars
            if full:
                self._cut_logs_locked()
        if full:
            self._spooled()

    def record_checkpoint(self, record: wire.CheckpointRecord) -> None:
        with self._lock:
            self._cut_all_locked()
            self._spool_locked("checkpoints", record)
        self._spooled()

    def cut(self) -> None:
        """Spool what waits in memory now."""
        with self._lock:
            self._cut_all_locked()

    def close(self) -> None:
        self.cut()

    def undelivered(self) -> int:
        """Batches waiting in the spool folder."""
        return len(spool_files(self.spool_dir))

    # -- batching (callers hold self._lock) --

    def _mark_buffered_locked(self) -> None:
        if self._buffered_since is None:
            self._buffered_since = time.monotonic()

    def _waited_too_long_locked(self) -> bool:
        since = self._buffered_since
        return (
            self.max_wait_s is not None and since is not None and time.monotonic() - since >= self.max_wait_s
        )

    def _cut_all_locked(self) -> None:
        self._cut_metrics_locked()
        self._cut_logs_locked()
        self._buffered_since = None

    def _cut_metrics_locked(self) -> None:
        if self._points:
            batch_id = wire.new_batch_id()
            self._write_locked("metrics", batch_id, metric_batch_json(batch_id, self._points, self._key_json))
            self._points = []

    def _cut_logs_locked(self) -> None:
        if self._log_parts:
            self._spool_locked("logs", wire.LogChunk(seq=self._log_seq, text="".join(self._log_parts)))
            self._log_seq += 1
            self._log_parts, self._log_chars = [], 0

    def _spool_locked(self, kind: str, body: SpoolBody) -> None:
        self._write_locked(kind, body.batch_id, body.model_dump_json())

    def _write_locked(self, kind: str, batch_id: str, text: str) -> None:
        name = f"{self._seq:012d}.{kind}.{batch_id}.json.gz"
        self._seq += 1
        # Level 1: a fifth of level 6's time for a quarter more bytes; the sender keeps up either way.
        data = gzip.compress(text.encode("utf-8"), compresslevel=1)
        temporary = self.spool_dir / f".{name}.tmp"
        temporary.write_bytes(data)
        # Renamed into place only when complete, so the sender never reads half a batch.
        os.replace(temporary, self.spool_dir / name)

    def _next_seq_on_disk(self) -> int:
        files = spool_files(self.spool_dir)
        if not files:
            return 0
        logger.info(
            "%d report batches left in %s by an earlier process will be replayed", len(files), self.spool_dir
        )
        return int(files[-1].name.split(".", 1)[0]) + 1
