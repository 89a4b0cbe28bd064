"""The supervisor's watch over the embedded Postgres and Valkey (docs/reliability.md#supervisor).

They are our children but not honcho's: without a watch, one that died stayed a zombie while the
web server and the workers answered errors for ever. The watch notices within a second, says so
with the service's log tail, and starts it again on the same data and port; after
``max_restarts`` attempts for one service it gives up and the supervisor stops everything with the
reason, rather than flapping.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from webapp.embedded import ServiceError, _tail

logger = logging.getLogger("studio")


class Watched(Protocol):
    @property
    def what(self) -> str: ...
    @property
    def proc(self) -> subprocess.Popen[bytes] | None: ...
    @property
    def log(self) -> Path: ...
    def start(self) -> None: ...


class ServiceWatch(threading.Thread):
    """Polls each service's process; ``on_give_up(reason)`` is called once when restarting failed."""

    def __init__(
        self,
        services: Sequence[Watched],
        on_give_up: Callable[[str], None],
        *,
        every_s: float = 1.0,
        max_restarts: int = 3,
    ) -> None:
        super().__init__(name="service-watch", daemon=True)
        self.services = list(services)
        self.on_give_up = on_give_up
        self.every_s = every_s
        self.max_restarts = max_restarts
        self.restarts = {service.what: 0 for service in self.services}
        self.failure: str | None = None
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(self.every_s):
            for service in self.services:
                code = service.proc.poll() if service.proc is not None else None
                if code is not None and not self._stopped.is_set() and not self._restart(service, code):
                    self.on_give_up(self.failure or "")
                    return

    def _restart(self, service: Watched, code: int) -> bool:
        count = self.restarts[service.what] + 1
        if count > self.max_restarts:
            self.failure = (
                f"the {service.what} exited with code {code} again after {self.max_restarts} restarts; "
                f"stopping everything. Its log ({service.log}) ends with:\n{_tail(service.log)}"
            )
            return False
        self.restarts[service.what] = count
        logger.error(
            "the %s exited with code %s; restarting it (%d of %d). Its log (%s) ends with:\n%s",
            service.what,
            code,
            count,
            self.max_restarts,
            service.log,
            _tail(service.log),
        )
        # A killed Postgres's backends notice and exit within moments; give them one.
        time.sleep(1.0)
        try:
            service.start()
        except ServiceError as exc:  # its process has exited again: the next tick tries once more
            logger.error("the %s did not come back: %s", service.what, exc)
            return True
        logger.warning("the %s is back (pid %s)", service.what, getattr(service.proc, "pid", "?"))
        return True
