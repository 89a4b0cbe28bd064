"""The webapp's reporter: batches spooled to disk, delivered in order from a background thread,
retried until the server answers (paths and bodies: :mod:`trainer.contract`; retries:
:data:`trainer.report.retry.POLICY`), heartbeats on a thread and a connection of their own."""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
import time
from pathlib import Path

import httpx
import tenacity

from trainer.contract import HEARTBEAT_PATH, Heartbeat
from trainer.report.retry import (
    POLICY,
    RETRYABLE,
    PermanentHttpError,
    RetryPolicy,
    raise_for_status,
    run_api_client,
)
from trainer.report.spool import SpoolingReporter, deliver_file, reject, spool_files

logger = logging.getLogger(__name__)

SETTLE_POLL_S = 0.05  # how often settle() looks whether the spool folder is empty


class HttpReporter(SpoolingReporter):
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
        super().__init__(
            spool_dir or _default_spool_dir(api_url, run_id, token),
            max_batch_points=max_batch_points,
            max_log_chars=max_log_chars,
            max_trajectories_per_batch=max_trajectories_per_batch,
            include_token_ids=include_token_ids,
        )
        self.flush_interval_s = flush_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.retry = RetryPolicy(backoff_initial_s, backoff_max_s)
        self.close_timeout_s = close_timeout_s
        # Heartbeats go on a connection of their own, so a slow batch upload never delays one.
        connect = {"timeout_s": request_timeout_s, "claimant": claimant, "transport": transport}
        self._client = run_api_client(api_url, token, **connect)  # type: ignore[arg-type]
        self._beat_client = run_api_client(api_url, token, **connect)  # type: ignore[arg-type]
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

    def _spooled(self) -> None:
        self._wake.set()

    def heartbeat(self, step: int, total: int) -> None:
        with self._lock:
            self._heartbeat = Heartbeat(step=step, total_steps=total, ts=time.time())
        self._beat_wake.set()

    def settle(self, timeout: float | None = None) -> None:
        """Send everything reported so far and wait up to ``timeout`` (default ``close_timeout_s``) for
        its delivery: a resumed attempt gets a new token, so it never replays this spool folder."""
        self.cut()
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
        self.cut()
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

    def _seconds_until_due(self) -> float:
        with self._lock:
            since = self._buffered_since
        if since is None:
            return self.flush_interval_s
        return max(0.0, since + self.flush_interval_s - time.monotonic())

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
        while files := spool_files(self.spool_dir):
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
        deliver_file(self._client, self.run_id, path)

    def _reject(self, path: Path, error: PermanentHttpError) -> None:
        where = reject(path)
        self.rejected += 1
        logger.error(
            "the server refused report batch %s (%s); dropped it (kept in %s), the others go on",
            path.name,
            error,
            where.parent,
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
