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

import psutil
import pytest

from tests.xdist_workers import free_port
from webapp.embedded import EmbeddedPostgres
from webapp.supervisor import pytest_args

ROOT = Path(__file__).resolve().parents[2]


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

    def wait_healthy(self, timeout: float = 120) -> dict[str, Any]:
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
