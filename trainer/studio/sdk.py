"""The ``studio`` SDK: log a run from any script, in the shape W&B users know (docs/sdk.md).

``studio.init`` opens the run on the server (an external run, through the SDK's open route) and
every ``log`` goes through the trainer's own reporter: points wait in memory up to a batch, each
batch is written to the run folder's spool, and a background thread delivers the spool through the
ingestion routes with the run's token, retrying with backoff. When the server cannot be reached at
``init`` (or ``STUDIO_MODE=offline``), nothing is sent: the run folder keeps everything and
``studio sync`` uploads it later (trainer/studio/sync.py).
"""

from __future__ import annotations

import atexit
import logging
import numbers
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx

from trainer.contract import SDK_ID_PATTERN, RunStatus
from trainer.report.http import HttpReporter
from trainer.report.retry import RETRYABLE, PermanentHttpError
from trainer.report.spool import SpoolingReporter
from trainer.studio.client import Settings, StudioClient, StudioError
from trainer.studio.run_folder import RunFolder, RunRecord, default_dir, this_process
from trainer.studio.sync import Opened, open_on_server, put_artifact, run_client
from trainer.studio.trajectory import trajectory_wire

logger = logging.getLogger("studio")

MODE_ENV = "STUDIO_MODE"  # "offline": never try the server
FINISH_TIMEOUT_ENV = "STUDIO_FINISH_TIMEOUT"  # seconds finish() waits for delivery (default 60)
BATCH_POINTS = 10_000  # points per metrics batch: the size ingestion takes best (docs/sdk.md#throughput)
# Offline, points that waited this long go to the run folder at the next log call, as online they
# would be sent: a killed script loses about its last second, not a whole batch (docs/sdk.md#a-script-that-died).
FLUSH_INTERVAL_S = 1.0
Resume = Literal["allow", "must", "never"]
HEARTBEAT_EVERY_S = 1.0
_PLAIN_NUMBERS = (int, float, bool)  # the common case, checked without isinstance's ABC machinery

_current: Run | None = None


class Run:
    """One run being logged. ``config`` and ``summary`` are dicts: what they hold at ``finish`` is
    stored with the run (the config as params, the summary as ``summary.<key>`` tags)."""

    def __init__(
        self, folder: RunFolder, record: RunRecord, opened: Opened | None, client: StudioClient | None
    ):
        self.id = record.id
        self.project = record.project
        self.config: dict[str, Any] = dict(record.config)
        self.summary: dict[str, Any] = dict(record.summary)
        self.dir = folder.path
        self._folder, self._record, self._opened, self._client = folder, record, opened, client
        self._reporter = _reporter(folder, opened)
        self._step = 0
        self._sample = 0
        self._skipped: set[str] = set()
        self._artifacts_put = True
        self._finished = False
        self._beat_at = -HEARTBEAT_EVERY_S

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def offline(self) -> bool:
        return self._opened is None

    @property
    def url(self) -> str | None:
        """The run's page on the server (None offline)."""
        server = self._record.server
        return f"{server['url']}/t/{server['team']}/runs/{server['run_id']}/" if self._opened else None

    @property
    def step(self) -> int:
        """The step the next ``log`` without ``step=`` goes to."""
        return self._step

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        """Numbers in ``data`` become metric points at ``step`` (default: one past the last step
        logged). Values that are not numbers (text, images) are left out, with one warning per key."""
        at = self._step if step is None else int(step)
        values = data if all(type(v) in _PLAIN_NUMBERS for v in data.values()) else self._numbers(data)
        self._reporter.log_metrics(at, values)
        now = time.monotonic()
        if now - self._beat_at >= HEARTBEAT_EVERY_S:  # a sign of life, not one per call
            self._beat_at = now
            self._reporter.heartbeat(at, 0)
        if commit is not False:
            self._step = at + 1

    def _numbers(self, data: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, numbers.Real) or hasattr(value, "__float__"):  # numpy and torch scalars
                values[key] = value
            elif key not in self._skipped:
                self._skipped.add(key)
                logger.warning("%r is not a number; the SDK logs numbers only", key)
        return values

    def log_trajectory(self, prompt: Any, steps: list[Any], **fields: Any) -> str:
        """One rollout, step by step, for the rollout viewer: ``prompt`` (text or chat messages) and
        ``steps`` (each a response text, or a dict with ``response``, ``reward``, ``tool_calls``...);
        ``reward``, ``step``, ``id``, ``group``, ``ground_truth``, ``data_source``, ``info`` as
        keywords (docs/sdk.md#trajectories). Its id; ValueError for what the server would refuse."""
        step = fields.pop("step", None)
        at = max(self._step - 1, 0) if step is None else int(step)
        wire = trajectory_wire(prompt, steps, sample_index=self._sample, **fields)
        self._sample += 1
        self._reporter.log_wires(at, [wire])
        return wire.id

    def log_artifact(self, path: str | os.PathLike[str], name: str | None = None) -> Path:
        """A file, kept in the run folder and put onto the run (the run page lists it)."""
        self._folder.artifacts.mkdir(parents=True, exist_ok=True)
        copy = self._folder.artifacts / (name or Path(path).name)
        shutil.copyfile(path, copy)
        if self._opened is not None:
            self._artifacts_put = self._put(copy) and self._artifacts_put
        return copy

    def _put(self, copy: Path) -> bool:
        assert self._opened is not None
        try:
            with run_client(self._opened) as http:
                put_artifact(http, self._opened, copy)
        except (*RETRYABLE, PermanentHttpError) as error:
            logger.warning("artifact %s not uploaded yet (%s); studio sync will", copy.name, error)
            return False
        return True

    def finish(self, exit_code: int = 0, quiet: bool | None = None) -> None:
        """End the run: succeeded for exit code 0, else failed. Waits (up to STUDIO_FINISH_TIMEOUT
        seconds) for what is left to arrive; what does not stays in the run folder for ``studio sync``."""
        global _current
        if self._finished:
            return
        self._finished = True
        record = self._record
        record.config, record.summary = dict(self.config), dict(self.summary)
        record.finished, record.exit_code = True, exit_code
        meta_sent = self._send_meta()
        status: RunStatus = "succeeded" if exit_code == 0 else "failed"
        self._reporter.set_status(status, "" if exit_code == 0 else f"exit code {exit_code}")
        if isinstance(self._reporter, HttpReporter):
            self._reporter.close(timeout=float(os.environ.get(FINISH_TIMEOUT_ENV) or 60))
        else:
            self._reporter.close()
        record.synced = (
            not self.offline and meta_sent and self._artifacts_put and not self._reporter.undelivered()
        )
        self._folder.write(record)
        if _current is self:
            _current = None
        if not record.synced and not quiet:
            print(
                f"studio: run {self.id} kept in {self.dir}; upload it with: studio sync {self.dir}",
                file=sys.stderr,
            )

    def _send_meta(self) -> bool:
        if self._client is None or self._opened is None:
            return False
        try:
            self._client.sdk_meta(self._opened.run_id, self._record.meta_body())
        except StudioError as error:
            logger.warning("the run's summary is not stored yet (%s); studio sync will", error)
            return False
        return True

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish(exit_code=0 if kind is None else 1)


def _reporter(folder: RunFolder, opened: Opened | None) -> SpoolingReporter:
    if opened is None:
        return SpoolingReporter(folder.spool, max_batch_points=BATCH_POINTS, max_wait_s=FLUSH_INTERVAL_S)
    return HttpReporter(
        opened.url,
        opened.run_id,
        opened.token,
        claimant=opened.claimant,
        spool_dir=folder.spool,
        max_batch_points=BATCH_POINTS,
        flush_interval_s=FLUSH_INTERVAL_S,
        backoff_max_s=5.0,
    )


def init(
    project: str | None = None,
    name: str | None = None,
    *,
    group: str | None = None,
    job_type: str | None = None,
    tags: list[str] | None = None,
    config: Mapping[str, Any] | None = None,
    id: str | None = None,
    resume: Resume | bool | None = None,
    dir: str | os.PathLike[str] | None = None,
    mode: Literal["online", "offline"] | None = None,
) -> Run:
    """Start a run (docs/sdk.md#init). ``id`` is the run's own id (default: a new one); ``resume``:
    "allow" takes the run of that id if there is one, "must" needs one, "never" (the default) refuses
    one. Offline when ``mode="offline"``, ``STUDIO_MODE=offline``, or the server cannot be reached."""
    global _current
    if _current is not None:
        _current.finish()
    run_id = id or uuid.uuid4().hex[:16]
    if not re.match(SDK_ID_PATTERN, run_id):
        raise ValueError(f"id {run_id!r}: up to 64 letters, digits, '-' or '_'")
    chosen: Resume = "allow" if resume is True else "never" if resume in (None, False) else resume  # type: ignore[assignment]
    record = RunRecord(
        id=run_id,
        project=project or "sdk",
        name=name or "",
        group=group or "",
        job_type=job_type or "",
        tags=list(tags or []),
        config=dict(config or {}),
        writer=this_process(),  # so `studio sync` can tell a script that died (docs/sdk.md#a-script-that-died)
    )
    folder = RunFolder(Path(dir or default_dir()) / f"run-{run_id}")
    client, opened = _open(record, chosen, mode or os.environ.get(MODE_ENV, "online"))
    folder.write(record)
    _current = Run(folder, record, opened, client)
    _install_exit_hooks()
    return _current


def _open(record: RunRecord, resume: Resume, mode: str) -> tuple[StudioClient | None, Opened | None]:
    """The client and the opened run; (None, None) to log offline. StudioError when the server
    answers with a refusal (a token refused, a resume it cannot do)."""
    if mode == "offline":
        return None, None
    settings = Settings.load()
    if not (settings.url and settings.token and settings.team):
        logger.warning(
            "studio: no server configured (STUDIO_URL, STUDIO_TOKEN, STUDIO_TEAM): logging offline"
        )
        return None, None
    client = StudioClient(settings)
    try:
        return client, open_on_server(client, record, resume)
    except StudioError as error:
        if error.status and error.status < 500:
            raise
        logger.warning("%s; logging offline to sync later", error)
        return None, None
    except httpx.HTTPError as error:
        logger.warning("cannot reach %s (%s); logging offline to sync later", settings.url, error)
        return None, None


def log(data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
    """``log`` on the current run (W&B's ``wandb.log``)."""
    current_run().log(data, step=step, commit=commit)


def finish(exit_code: int = 0, quiet: bool | None = None) -> None:
    """``finish`` on the current run, if one is open."""
    if _current is not None:
        _current.finish(exit_code, quiet)


def current_run() -> Run:
    if _current is None:
        raise RuntimeError("no run: call studio.init() first")
    return _current


_hooks_installed = False
_uncaught: list[BaseException] = []


def _install_exit_hooks() -> None:
    """A script that ends without finish() still ends its run: failed when an exception ended it."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def remember(kind: type[BaseException], error: BaseException, tb: TracebackType | None) -> None:
        _uncaught.append(error)
        previous(kind, error, tb)

    sys.excepthook = remember
    atexit.register(lambda: finish(exit_code=1 if _uncaught else 0))
