"""The webapp's reporter: batches spooled to disk, delivered in order from a background thread,
retried until the server answers (paths and bodies: :mod:`trainer.contract`; retries:
:data:`trainer.report.retry.POLICY`), heartbeats on a thread and a connection of their own."""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx
import tenacity
from pydantic import ValidationError

from trainer.contract import (
    CHECKPOINTS_PATH,
    HEARTBEAT_PATH,
    IDEMPOTENCY_HEADER,
    LOGS_PATH,
    METRICS_PATH,
    STATUS_PATH,
    TOKEN_SIGNALS_PATH,
    TRAJECTORIES_PATH,
    CheckpointRecord,
    Heartbeat,
    LogChunk,
    MetricBatch,
    MetricPoint,
    RunStatus,
    StatusUpdate,
    StepSignalsWire,
    TokenSignalsBatch,
    TrajectoryBatch,
    TrajectoryWire,
    to_floats,
)
from trainer.mdp import Trajectory
from trainer.report.reporters import Reporter
from trainer.report.retry import (
    POLICY,
    RETRYABLE,
    PermanentHttpError,
    RetryPolicy,
    raise_for_status,
    run_api_client,
)

logger = logging.getLogger(__name__)

SETTLE_POLL_S = 0.05  # how often settle() looks whether the spool folder is empty
# <seq>.<kind>.<batch_id>.json.gz: the zero-padded seq makes name order delivery order.
_SPOOL_NAME = re.compile(r"^(\d{12})\.([a-z]+)\.([0-9a-f]+)\.json\.gz$")
_KIND_PATHS = {
    "metrics": METRICS_PATH,
    "trajectories": TRAJECTORIES_PATH,
    "status": STATUS_PATH,
    "logs": LOGS_PATH,
    "checkpoints": CHECKPOINTS_PATH,
    "signals": TOKEN_SIGNALS_PATH,
}


class HttpReporter(Reporter):
    """Reports to the webapp's ingestion API from a background thread.

    Every batch is first written to ``spool_dir`` (one gzipped file per batch, named by sequence
    number), then delivered oldest first and deleted once the server answered 2xx. So a server
    that is away simply leaves files behind, which go out in order when it returns (or when a
    later process for the same run starts with the same spool folder). Connection errors, 5xx and
    429 are retried with exponential backoff (tenacity, capped at ``backoff_max_s``, honouring
    ``Retry-After``); any other 4xx is a refusal the same request would get again: the batch is
    logged as an error, counted in :attr:`rejected`, moved to ``spool_dir/rejected``, and the batches
    after it flow on (docs/security.md#refusals). A trajectory the contract refuses before it is sent
    (an id too long for the server) is dropped the same way, alone.
    Heartbeats are not spooled: only the latest one matters. A thread of their own sends it, on its
    own connection, when the step changes and every ``heartbeat_interval_s`` otherwise, so a backlog
    of batches (a spool draining after an outage) never holds back the sign of life.
    ``claimant`` is the id the run was claimed with (trainer.contract.CLAIMANT_HEADER): every call
    carries it, so the server takes changes from this process only.
    """

    def __init__(
        self,
        api_url: str,
        run_id: int | str,
        token: str,
        *,
        claimant: str = "",
        spool_dir: str | Path | None = None,
        max_batch_points: int = 1000,
        max_log_chars: int = 64_000,
        max_trajectories_per_batch: int = 32,
        flush_interval_s: float = 2.0,
        heartbeat_interval_s: float = 15.0,
        backoff_initial_s: float = POLICY.initial_s,
        backoff_max_s: float = POLICY.max_s,
        request_timeout_s: float = 10.0,
        close_timeout_s: float = 30.0,
        include_token_ids: bool = False,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.run_id = run_id
        self.spool_dir = Path(spool_dir) if spool_dir else _default_spool_dir(api_url, run_id, token)
        self.rejected_dir = self.spool_dir / "rejected"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.max_batch_points = max_batch_points
        self.max_log_chars = max_log_chars
        self.max_trajectories_per_batch = max_trajectories_per_batch
        self.flush_interval_s = flush_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.retry = RetryPolicy(backoff_initial_s, backoff_max_s)
        self.close_timeout_s = close_timeout_s
        self.include_token_ids = include_token_ids
        # Heartbeats go on a connection of their own, so a slow batch upload never delays one.
        connect = {"timeout_s": request_timeout_s, "claimant": claimant, "transport": transport}
        self._client = run_api_client(api_url, token, **connect)  # type: ignore[arg-type]
        self._beat_client = run_api_client(api_url, token, **connect)  # type: ignore[arg-type]
        self._lock = threading.Lock()
        self.rejected = 0  # batches the server refused (4xx) and trajectories the contract refused
        self._points: list[MetricPoint] = []
        self._log_parts: list[str] = []
        self._buffered_since: float | None = None  # monotonic time of the oldest unspooled point or line
        self._log_chars = 0
        self._seq = self._next_seq_on_disk()
        self._log_seq = 0
        self._heartbeat: Heartbeat | None = None
        self._heartbeat_sent: tuple[int, float] | None = None  # (step, monotonic time)
        self._beat_wake = threading.Event()
        self._wake = threading.Event()
        self._interrupt = threading.Event()
        self._closing = threading.Event()
        self._deadline: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"http-reporter-{run_id}", daemon=True)
        self._thread.start()
        self._beat_thread = threading.Thread(target=self._beat, name=f"http-heartbeat-{run_id}", daemon=True)
        self._beat_thread.start()

    # -- producer side (training thread) --

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        now = time.time()
        points = [
            MetricPoint(key=key, step=step, value=value, ts=now) for key, value in to_floats(metrics).items()
        ]
        with self._lock:
            self._points.extend(points)
            self._mark_buffered_locked()
            full = len(self._points) >= self.max_batch_points
            if full:
                self._cut_metrics_locked()
        if full:
            self._wake.set()

    def log_trajectories(self, step: int, trajectories: Sequence[Trajectory]) -> None:
        wire = [w for w in (self._wire(t) for t in trajectories) if w is not None]
        size = self.max_trajectories_per_batch
        with self._lock:
            self._cut_all_locked()
            for start in range(0, len(wire), size):
                self._spool_locked(
                    "trajectories",
                    TrajectoryBatch(training_step=step, trajectories=wire[start : start + size]),
                )
        self._wake.set()

    def log_token_signals(self, steps: Sequence[StepSignalsWire]) -> None:
        size = self.max_trajectories_per_batch
        with self._lock:
            self._cut_all_locked()
            for start in range(0, len(steps), size):
                self._spool_locked("signals", TokenSignalsBatch(steps=list(steps[start : start + size])))
        self._wake.set()

    def _wire(self, trajectory: Trajectory) -> TrajectoryWire | None:
        try:
            return TrajectoryWire.from_trajectory(trajectory, include_token_ids=self.include_token_ids)
        except ValidationError as error:
            # The server would refuse it too: one trajectory lost, logged, never the whole batch.
            self.rejected += 1
            logger.error("trajectory %s cannot be reported and is dropped: %s", trajectory.id, error)
            return None

    def set_status(self, status: RunStatus, message: str = "", progress: float | None = None) -> None:
        with self._lock:
            self._cut_all_locked()  # a status follows the metrics logged before it
            self._spool_locked("status", StatusUpdate(status=status, message=message, progress=progress))
        self._wake.set()

    def heartbeat(self, step: int, total: int) -> None:
        with self._lock:
            self._heartbeat = Heartbeat(step=step, total_steps=total, ts=time.time())
        self._beat_wake.set()

    def log_text(self, text: str) -> None:
        with self._lock:
            self._log_parts.append(text)
            self._log_chars += len(text)
            self._mark_buffered_locked()
            full = self._log_chars >= self.max_log_chars
            if full:
                self._cut_logs_locked()
        if full:
            self._wake.set()

    def record_checkpoint(self, record: CheckpointRecord) -> None:
        with self._lock:
            self._cut_all_locked()
            self._spool_locked("checkpoints", record)
        self._wake.set()

    def settle(self, timeout: float | None = None) -> None:
        """Send everything reported so far and wait up to ``timeout`` (default ``close_timeout_s``) for
        its delivery: a resumed attempt gets a new token, so it never replays this spool folder."""
        with self._lock:
            self._cut_all_locked()
        self._wake.set()
        deadline = time.monotonic() + (self.close_timeout_s if timeout is None else timeout)
        while self.undelivered() and time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)
        if self.undelivered():
            logger.warning("%d report batches not delivered before the checkpoint", self.undelivered())

    def close(self, timeout: float | None = None) -> None:
        """Flush everything and wait up to ``timeout`` (default ``close_timeout_s``) for delivery.

        What is still undelivered then stays in the spool folder for a later process to replay.
        """
        if self._closing.is_set():
            return
        with self._lock:
            self._cut_all_locked()
        self._deadline = time.monotonic() + (self.close_timeout_s if timeout is None else timeout)
        self._closing.set()
        self._interrupt.set()  # cut a backoff sleep short: try once more right away
        self._wake.set()
        self._beat_wake.set()
        self._thread.join(max(0.0, self._deadline - time.monotonic()) + 1.0)
        self._beat_thread.join(max(0.0, self._deadline - time.monotonic()) + 1.0)
        left = self.undelivered()
        if left:
            logger.warning(
                "%d report batches not delivered; they stay in %s for a later replay", left, self.spool_dir
            )
        if not self._thread.is_alive():
            self._client.close()
        if not self._beat_thread.is_alive():
            self._beat_client.close()

    def undelivered(self) -> int:
        """Batches waiting in the spool folder."""
        return len(self._spool_files())

    # -- batching (callers hold self._lock) --

    def _mark_buffered_locked(self) -> None:
        if self._buffered_since is None:
            self._buffered_since = time.monotonic()

    def _cut_all_locked(self) -> None:
        self._cut_metrics_locked()
        self._cut_logs_locked()
        self._buffered_since = None

    def _seconds_until_due(self) -> float:
        with self._lock:
            since = self._buffered_since
        if since is None:
            return self.flush_interval_s
        return max(0.0, since + self.flush_interval_s - time.monotonic())

    def _cut_metrics_locked(self) -> None:
        if self._points:
            self._spool_locked("metrics", MetricBatch(points=self._points))
            self._points = []

    def _cut_logs_locked(self) -> None:
        if self._log_parts:
            self._spool_locked("logs", LogChunk(seq=self._log_seq, text="".join(self._log_parts)))
            self._log_seq += 1
            self._log_parts, self._log_chars = [], 0

    def _spool_locked(
        self,
        kind: str,
        body: MetricBatch | TrajectoryBatch | TokenSignalsBatch | StatusUpdate | LogChunk | CheckpointRecord,
    ) -> None:
        name = f"{self._seq:012d}.{kind}.{body.batch_id}.json.gz"
        self._seq += 1
        data = gzip.compress(body.model_dump_json().encode("utf-8"), compresslevel=6)
        temporary = self.spool_dir / f".{name}.tmp"
        temporary.write_bytes(data)
        # Renamed into place only when complete, so the sender never reads half a batch.
        os.replace(temporary, self.spool_dir / name)

    def _next_seq_on_disk(self) -> int:
        files = self._spool_files()
        if not files:
            return 0
        logger.info(
            "%d report batches left in %s by an earlier process will be replayed", len(files), self.spool_dir
        )
        return int(files[-1].name.split(".", 1)[0]) + 1

    def _spool_files(self) -> list[Path]:
        return sorted(p for p in self.spool_dir.iterdir() if p.is_file() and _SPOOL_NAME.match(p.name))

    # -- sender side (background thread) --

    def _run(self) -> None:
        while True:
            self._wake.wait(self._seconds_until_due())
            self._wake.clear()
            # Read before draining: close() spools its last batches before setting the flag, so a
            # drain that starts after seeing it also sees them.
            closing = self._closing.is_set()
            with self._lock:
                since = self._buffered_since
                # Batching by time: points wait at most flush_interval_s for company.
                if closing or (since is not None and time.monotonic() - since >= self.flush_interval_s):
                    self._cut_all_locked()
            try:
                drained = self._drain()
            except Exception:
                # A bug here must not kill reporting for the rest of the run; the spool keeps the data.
                logger.exception("report sender failed; retrying on the next tick")
                drained = False
            if closing and (drained or self._past_deadline()):
                return

    def _drain(self) -> bool:
        """Deliver spooled batches oldest first; False when the server stayed away until the deadline."""
        while files := self._spool_files():
            for path in files:
                try:
                    self._deliver_with_retries(path)
                except PermanentHttpError as error:
                    self._reject(path, error)
                except RETRYABLE:
                    return False  # only when closing and out of time; the file stays for a replay
        return True

    def _deliver_with_retries(self, path: Path) -> None:
        # The policy's backoff; no give-up while the run runs: the batch waits on disk, not in memory.
        retrying = self.retry.retrying(
            stop=self._out_of_time, sleep=self._sleep, before_sleep=self._log_retry
        )
        retrying(self._deliver, path)

    def _deliver(self, path: Path) -> None:
        match = _SPOOL_NAME.match(path.name)
        if match is None:
            raise ValueError(f"not a spool file: {path}")
        kind, batch_id = match.group(2), match.group(3)
        response = self._client.post(
            _KIND_PATHS[kind].format(run_id=self.run_id),
            content=path.read_bytes(),
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                IDEMPOTENCY_HEADER: batch_id,
            },
        )
        raise_for_status(response)
        path.unlink(missing_ok=True)

    def _reject(self, path: Path, error: PermanentHttpError) -> None:
        self.rejected_dir.mkdir(exist_ok=True)
        os.replace(path, self.rejected_dir / path.name)
        self.rejected += 1
        logger.error(
            "the server refused report batch %s (%s); dropped it (kept in %s), the others go on",
            path.name,
            error,
            self.rejected_dir,
        )

    def _beat(self) -> None:
        while not self._closing.is_set():
            self._beat_wake.wait(self.heartbeat_interval_s)
            self._beat_wake.clear()
            if self._closing.is_set():
                return  # the run's last word is its status, spooled in order: no beat after it
            try:
                self._maybe_send_heartbeat()
            except Exception:
                logger.exception("heartbeat sender failed; retrying on the next tick")

    def _maybe_send_heartbeat(self) -> None:
        with self._lock:
            beat = self._heartbeat
        if beat is None:
            return
        now = time.monotonic()
        last = self._heartbeat_sent
        if last is not None and last[0] == beat.step and now - last[1] < self.heartbeat_interval_s:
            return
        # Refresh ts so a heartbeat resent for the same step still proves the process is alive.
        fresh = beat.model_copy(update={"ts": time.time()})
        try:
            response = self._beat_client.post(
                HEARTBEAT_PATH.format(run_id=self.run_id),
                content=fresh.model_dump_json(),
                headers={"Content-Type": "application/json"},
            )
            raise_for_status(response)
        except (*RETRYABLE, PermanentHttpError) as error:
            logger.debug("heartbeat not delivered: %s", error)
            return
        self._heartbeat_sent = (beat.step, now)

    # -- tenacity hooks --

    def _out_of_time(self, state: tenacity.RetryCallState) -> bool:
        return self._past_deadline()

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _sleep(self, seconds: float) -> None:
        if self._deadline is not None:
            seconds = min(seconds, max(0.0, self._deadline - time.monotonic()))
        self._interrupt.wait(seconds)
        self._interrupt.clear()

    def _log_retry(self, state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log = (
            logger.warning
            if state.attempt_number in (1, 10) or state.attempt_number % 50 == 0
            else logger.debug
        )
        log("report delivery failed (%s); attempt %d, retrying in %.1fs", error, state.attempt_number, wait)


def _default_spool_dir(api_url: str, run_id: int | str, token: str) -> Path:
    # Keyed by server and token as well as the run id: a restarted process of the same run replays
    # what its predecessor left, but run 1 of another server (or database) never sees it.
    key = hashlib.sha256(f"{api_url}\n{token}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "agent-r1-studio-spool" / f"run-{run_id}-{key}"
