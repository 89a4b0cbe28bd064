"""The supervisor's watch over its children: the web server, the Celery worker and beat, the embedded
Postgres and Valkey (docs/reliability.md#supervisor).

One that dies (an OOM kill, a crash) is noticed within a tick, its end is logged with its last words,
and it is started again after a backoff that doubles with each death in the window (capped); only
when one dies more than ``max_restarts`` times within ``window_s`` does the watch give up and the
supervisor stop everything with the reason, rather than flap for ever. The children's states go to a
small JSON file under the var folder that /healthz reads, so a restarting child shows there.

honcho, which ran the three commands before, stops them all when one exits, by design; supervisord
or circus would be a second daemon with its own config that cannot own our embedded servers' start
and readiness checks. So the watch, which already restarted the embedded servers, watches all five.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from webapp.embedded import ServiceError, process_alive

logger = logging.getLogger("studio")
STATUS_FILE = "supervisor.json"  # under STUDIO_VAR_DIR; /healthz reads it (webapp/healthz.py)
RUNNING, RESTARTING, GAVE_UP = "running", "restarting", "gave up"
STOP_TIMEOUT_S = 6.0


class Watched(Protocol):
    @property
    def what(self) -> str: ...
    @property
    def proc(self) -> subprocess.Popen[bytes] | None: ...
    def last_words(self) -> str: ...
    def start(self) -> None: ...


@dataclass(frozen=True)
class RestartPolicy:
    """Backoff between restarts of one child, and when to stop trying."""

    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_restarts: int = 5  # within window_s; one more death gives up
    window_s: float = 300.0

    def delay(self, recent_deaths: int) -> float:
        """The wait before the restart that follows the ``recent_deaths``-th death in the window."""
        return min(self.first_delay_s * 2 ** max(recent_deaths - 1, 0), self.max_delay_s)


@dataclass
class Command:
    """A command the supervisor runs (web, worker, beat) in a process group of its own, so that a
    dead one's orphans (gunicorn's workers, Celery's pool) are killed with it and free its port.
    Its output goes to ours, each line prefixed with its name; the last lines are kept for the log."""

    what: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=15), init=False)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.argv, env=self.env, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        threading.Thread(target=self._copy_output, args=(self.proc,), daemon=True).start()

    def _copy_output(self, proc: subprocess.Popen[bytes]) -> None:
        for raw in proc.stdout or ():
            line = raw.decode(errors="replace").rstrip("\n")
            self._tail.append(line)
            with contextlib.suppress(OSError):
                sys.stdout.write(f"{self.what} | {line}\n")
                sys.stdout.flush()

    def last_words(self) -> str:
        return "Its output ends with:\n" + ("\n".join(self._tail) or "(nothing)")

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


def stop_commands(commands: Sequence[Command]) -> None:
    """SIGTERM every command's group at once, SIGKILL what is left after STOP_TIMEOUT_S."""
    for command in commands:
        command.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for command in commands:
        if command.proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            command.proc.wait(max(deadline - time.monotonic(), 0.1))
        command.signal_group(signal.SIGKILL)
        command.proc.wait()


@dataclass
class ChildState:
    state: str = RUNNING
    pid: int | None = None
    restarts: int = 0
    last_exit: str = ""  # why it last ended, for /healthz and the log
    deaths: list[float] = field(default_factory=list)  # monotonic times within the window
    restart_at: float = 0.0


class ServiceWatch(threading.Thread):
    """Polls each child; restarts a dead one after its backoff; ``on_give_up(reason)`` is called once
    when one died too often. ``status_dir``: where the children's states are written for /healthz."""

    def __init__(
        self,
        services: Sequence[Watched],
        on_give_up: Callable[[str], None],
        *,
        every_s: float = 0.5,
        max_restarts: int = RestartPolicy.max_restarts,
        policy: RestartPolicy | None = None,
        status_dir: Path | None = None,
    ) -> None:
        super().__init__(name="service-watch", daemon=True)
        self.services = list(services)
        self.on_give_up = on_give_up
        self.every_s = every_s
        self.policy = policy or RestartPolicy(max_restarts=max_restarts)
        self.status_path = status_dir / STATUS_FILE if status_dir is not None else None
        self.states = {s.what: ChildState(pid=s.proc.pid if s.proc else None) for s in self.services}
        self.failure: str | None = None
        self._stopped = threading.Event()
        self._write_status()

    @property
    def restarts(self) -> dict[str, int]:
        return {what: state.restarts for what, state in self.states.items()}

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        try:
            while not self._stopped.wait(self.every_s):
                for service in self.services:
                    if not self._stopped.is_set() and not self._tend(service):
                        self.on_give_up(self.failure or "")
                        return
        finally:
            if self.status_path is not None and self.failure is None:
                self.status_path.unlink(missing_ok=True)

    def _tend(self, service: Watched) -> bool:
        """One look at one child; False when it died once too often."""
        state = self.states[service.what]
        if state.state == RESTARTING:
            return time.monotonic() < state.restart_at or self._start_again(service, state)
        code = service.proc.poll() if service.proc is not None else None
        return code is None or self._died(service, state, f"exited with code {code}")

    def _died(self, service: Watched, state: ChildState, how: str) -> bool:
        now = time.monotonic()
        state.deaths = [t for t in state.deaths if now - t < self.policy.window_s] + [now]
        state.last_exit, state.pid = how, None
        recent = len(state.deaths)
        if recent > self.policy.max_restarts:
            self.failure = (
                f"the {service.what} {how} again after {self.policy.max_restarts} restarts within "
                f"{self.policy.window_s:.0f} s; stopping everything. {service.last_words()}"
            )
            state.state = GAVE_UP
            self._write_status()
            return False
        delay = self.policy.delay(recent)
        state.state, state.restart_at = RESTARTING, now + delay
        logger.error(
            "the %s %s; restarting it in %.0f s (%d of %d within %.0f s). %s",
            service.what, how, delay, recent, self.policy.max_restarts, self.policy.window_s,
            service.last_words(),
        )  # fmt: skip
        self._write_status()
        return True

    def _start_again(self, service: Watched, state: ChildState) -> bool:
        """Start it after its backoff; a start that fails is one more death."""
        if isinstance(service, Command):
            service.signal_group(signal.SIGKILL)  # its orphans hold its port
        try:
            service.start()
        except (ServiceError, OSError) as exc:
            return self._died(service, state, f"did not come back ({exc})")
        state.state, state.restarts = RUNNING, state.restarts + 1
        state.pid = service.proc.pid if service.proc else None
        logger.warning("the %s is back (pid %s)", service.what, state.pid)
        self._write_status()
        return True

    def _write_status(self) -> None:
        if self.status_path is None:
            return
        children = {
            what: {"state": s.state, "pid": s.pid, "restarts": s.restarts, "last_exit": s.last_exit}
            for what, s in self.states.items()
        }
        body = {"pid": os.getpid(), "updated": time.time(), "children": children}
        partial = self.status_path.with_suffix(".part")
        partial.write_text(json.dumps(body))
        partial.replace(self.status_path)  # a reader never sees half a file


def read_status(var_dir: Path) -> dict[str, Any] | None:
    """The supervisor's children as it last wrote them; None without a live supervisor (the web
    server runs under another one, a container's, or the file is left from a killed supervisor)."""
    try:
        body = json.loads((var_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    pid = body.get("pid") if isinstance(body, dict) else None
    if not isinstance(pid, int) or pid <= 0 or not process_alive(pid):
        return None
    return body
