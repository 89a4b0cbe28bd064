"""`make run`'s supervisor, run for real as a subprocess: embedded services, supervision, restarts, faults."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.xdist_workers import free_port
from webapp.embedded import EmbeddedPostgres
from webapp.service_watch import STATUS_FILE, Command, RestartPolicy, ServiceWatch
from webapp.supervisor import pytest_args

ROOT = Path(__file__).resolve().parents[2]
ADMIN_PASSWORD = "s3cret-pass"


def supervisor_env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "STUDIO_VAR_DIR")}
    env.update(
        STUDIO_VAR_DIR=str(var_dir), PORT=str(free_port()), STUDIO_PG_PORT=str(free_port()),
        STUDIO_VALKEY_PORT=str(free_port()), PYTHONUNBUFFERED="1",
    )  # fmt: skip
    env.update(extra)
    return env


class Launched:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log_path = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webapp.supervisor", "run", "--web-workers", "1"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['PORT']}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"supervisor exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=5) as response:
                    return dict(json.load(response))
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise AssertionError(f"not healthy within {timeout} s:\n{self.log()}")

    def health(self) -> dict[str, Any] | None:
        """/healthz's body, 200 or 503; None while nothing answers."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=10) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as error:
            return dict(json.load(error))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def dashboard_answers(self) -> bool:
        """The admin logs in and gets the dashboard: the web server, Postgres and sessions all work."""
        try:
            with httpx.Client(base_url=self.url, timeout=30) as client:
                client.get("/accounts/login/")
                form = {"username": "admin", "password": ADMIN_PASSWORD,
                        "csrfmiddlewaretoken": client.cookies.get("csrftoken", "")}  # fmt: skip
                return client.post("/accounts/login/", data=form, follow_redirects=True).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_for(self, check: Any, what: str, timeout: float = 300) -> None:
        """Poll ``check`` with a generous deadline; past it, fail with what the product said."""
        deadline = time.monotonic() + timeout
        while not check():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the supervisor exited with {self.proc.returncode}:\n{self.log()[-6000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} within {timeout} s: {self.health()}\n{self.log()[-6000:]}")
            time.sleep(0.5)

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children()

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[list[Launched]]:
    runs: list[Launched] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            for child in run.descendants():
                child.kill()
            run.proc.kill()


def start(launched: list[Launched], env: dict[str, str], tmp_path: Path) -> Launched:
    run = Launched(env, tmp_path / f"supervisor-{len(launched)}.log")
    launched.append(run)
    return run


@pytest.mark.slow
def test_it_runs_everything_stops_on_sigterm_and_reuses_its_data(
    tmp_path: Path, launched: list[Launched]
) -> None:
    var_dir = tmp_path / "var"
    first = start(launched, supervisor_env(var_dir), tmp_path)
    health = first.wait_healthy()
    assert health["status"] == "ok", health
    assert "Created admin account 'admin' with password:" in first.log()
    assert "Demo team ready" in first.log()  # the first-run demo: datasets and a ready experiment
    children = first.descendants()
    names = {p.name() for p in children}
    assert {"postgres", "valkey-server", "gunicorn", "celery"} <= names, names
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in {p.pid for p in children}:
            assert conn.laddr.ip == "127.0.0.1", conn

    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(10)  # the bound: every child stops within 10 s
    assert not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not (var_dir / "studio.pid").exists()

    second = start(launched, supervisor_env(var_dir), tmp_path)
    assert second.wait_healthy()["status"] == "ok"
    assert (
        "Created admin account" not in second.log()
    )  # same database: the admin from the first run is still there
    second.stop()


@pytest.mark.slow
def test_it_uses_the_configured_servers_instead_of_embedded_ones(
    tmp_path: Path, launched: list[Launched]
) -> None:
    var_dir = tmp_path / "var"
    env = supervisor_env(var_dir, DATABASE_URL=os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/supervisor_external",
                       REDIS_URL=os.environ["REDIS_URL"].rsplit("/", 1)[0] + "/5", STUDIO_ADMIN_PASSWORD="s3cret-pass")  # fmt: skip
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS supervisor_external")
        conn.execute("CREATE DATABASE supervisor_external")
    run = start(launched, env, tmp_path)
    assert run.wait_healthy()["status"] == "ok"
    assert "with the password from STUDIO_ADMIN_PASSWORD" in run.log()
    assert not (var_dir / "postgres").exists() and not (var_dir / "valkey").exists()
    assert {"postgres", "valkey-server"}.isdisjoint({p.name() for p in run.descendants()})
    run.stop()


# The supervisor's children as /healthz names them, and how to tell each among its processes.
CHILDREN = {
    "Celery worker": lambda p: p.name() == "celery" and "worker" in p.cmdline(),
    "Celery beat": lambda p: p.name() == "celery" and "beat" in p.cmdline(),
    "web server": lambda p: p.name() == "gunicorn",
    "embedded Valkey": lambda p: p.name() == "valkey-server",
    "embedded Postgres": lambda p: p.name() == "postgres",
}


@pytest.mark.slow
def test_a_killed_child_is_restarted_and_the_product_answers_again(
    tmp_path: Path, launched: list[Launched]
) -> None:
    var_dir = tmp_path / "var"
    run = start(launched, supervisor_env(var_dir, STUDIO_ADMIN_PASSWORD=ADMIN_PASSWORD), tmp_path)
    assert run.wait_healthy()["status"] == "ok"
    for what, is_it in CHILDREN.items():
        (victim,) = [p for p in run.children() if is_it(p)]
        victim.kill()  # SIGKILL, as the OOM killer does
        # /healthz reports the restart: the child runs again, restarted once, with why it ended.
        run.wait_for(lambda what=what: _restarted(run.health(), what), f"the {what} restarted")
        run.wait_for(run.dashboard_answers, f"the dashboard after the {what} restarted")
        assert run.proc.poll() is None, run.log()
        assert f"the {what} exited with code -9; restarting it in" in run.log()
    final = run.health()
    assert final is not None and final["status"] == "ok", final
    run.stop()
    assert not (var_dir / STATUS_FILE).exists()


def _restarted(health: dict[str, Any] | None, what: str) -> bool:
    child = ((health or {}).get("supervisor") or {}).get("children", {}).get(what, {})
    done = child.get("state") == "running" and child.get("restarts") == 1
    return done and child.get("last_exit") == "exited with code -9" and health["status"] == "ok"  # type: ignore[index]


def test_a_child_that_keeps_dying_is_restarted_with_backoff_then_given_up(tmp_path: Path) -> None:
    policy = RestartPolicy(first_delay_s=0.05, max_delay_s=0.2, max_restarts=3, window_s=60)
    assert [policy.delay(n) for n in range(1, 6)] == [0.05, 0.1, 0.2, 0.2, 0.2]
    crashing = Command("crasher", ["sh", "-c", "echo out of memory; exit 3"], dict(os.environ), tmp_path)
    crashing.start()
    reasons: list[str] = []
    watch = ServiceWatch(
        [crashing], on_give_up=reasons.append, every_s=0.02, policy=policy, status_dir=tmp_path
    )
    watch.start()
    watch.join(60)
    assert watch.restarts == {"crasher": 3} and not watch.is_alive()
    assert reasons == [watch.failure]
    assert (
        "the crasher exited with code 3 again after 3 restarts within 60 s; stopping everything" in reasons[0]
    )
    assert "out of memory" in reasons[0]
    status = json.loads((tmp_path / STATUS_FILE).read_text())  # kept: it says why everything stopped
    assert status["children"]["crasher"]["state"] == "gave up"


def run_to_exit(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webapp.supervisor", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_malformed_env_var_fails_naming_the_variable(tmp_path: Path) -> None:
    result = run_to_exit(supervisor_env(tmp_path / "var", PORT="eighty"))
    assert result.returncode == 2
    assert "PORT must be a whole number, got 'eighty'" in result.stderr


def test_a_malformed_database_url_fails_naming_the_variable(tmp_path: Path) -> None:
    result = run_to_exit(supervisor_env(tmp_path / "var", DATABASE_URL="mysql://somewhere/db"))
    assert result.returncode == 2
    assert "DATABASE_URL must be a URL starting with postgres://" in result.stderr


def test_a_port_in_use_gives_a_clear_message(tmp_path: Path) -> None:
    env = supervisor_env(tmp_path / "var")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", int(env["PORT"])))
        sock.listen()
        result = run_to_exit(env)
    assert result.returncode == 2
    assert f"port {env['PORT']} on 127.0.0.1 is already in use" in result.stderr
    assert "set PORT to another port" in result.stderr


def test_a_data_dir_owned_by_another_server_gives_a_clear_message(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    other = EmbeddedPostgres(var_dir / "postgres", free_port(), fast=True)
    other.start()
    try:
        result = run_to_exit(supervisor_env(var_dir))
    finally:
        other.stop()
    assert result.returncode == 2
    assert "is in use by another Postgres server" in result.stderr


def test_another_supervisor_on_the_same_var_dir_is_refused(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (var_dir / "studio.pid").write_text(str(sleeper.pid))
        result = run_to_exit(supervisor_env(var_dir))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 2
    assert f"another Agent-R1 Studio (pid {sleeper.pid}) is already running" in result.stderr


def test_a_stale_pid_file_is_replaced(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (var_dir / "studio.pid").write_text(str(dead.pid))
    env = supervisor_env(var_dir)
    # The web port is taken so the supervisor stops right after claiming the pid file.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", int(env["PORT"])))
        sock.listen()
        result = run_to_exit(env)
    assert (
        f"removing a stale pid file {var_dir / 'studio.pid'} (pid {dead.pid} is not running)" in result.stderr
    )
    assert "already in use" in result.stderr
    assert not (var_dir / "studio.pid").exists()


def test_options_for_pytest_pass_through_after_a_double_dash() -> None:
    assert pytest_args(["--", "-n", "2", "tests", "-q"]) == ["-n", "2", "tests", "-q"]
    assert pytest_args(["tests", "-q"]) == ["tests", "-q"]
    assert pytest_args([]) == []
