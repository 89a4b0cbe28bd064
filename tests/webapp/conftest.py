"""Real services for web tests: a Celery worker process and Debian's Chromium through Playwright."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def _database_url_for_tests() -> str:
    from django.db import connection

    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


class WorkerProcess:
    """A real `celery worker` process on the test broker and the test database. With ``fault``, it
    kills itself inside its launch task (tests/webapp/experiments/worker_faults.py says where)."""

    def __init__(self, name: str, fault: str = "") -> None:
        self.name = name
        self.fault = fault
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from webapp.celery import app

        env = {**os.environ, "DATABASE_URL": _database_url_for_tests()}
        faults: list[str] = []
        if self.fault:
            env["STUDIO_TEST_WORKER_FAULT"] = self.fault
            faults = ["--include", "tests.webapp.experiments.worker_faults"]
        celery = str(Path(sys.executable).parent / "celery")
        self.proc = subprocess.Popen(
            [celery, "-A", "webapp", "worker", "--pool", "solo", "--loglevel", "WARNING",
             "--hostname", f"{self.name}@%h", "--without-mingle", "--without-gossip", *faults],
            cwd=ROOT, env=env, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Celery worker exited with code {self.proc.returncode}")
            replies = app.control.ping(timeout=0.5) or []
            if any(name.startswith(self.name + "@") for reply in replies for name in reply):
                return
        raise RuntimeError("the Celery worker did not answer a ping within 60 s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_worker(transactional_db: Any) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts workers on demand (``start(fault=...)``); every one started is stopped after the test."""
    started: list[WorkerProcess] = []

    def start(fault: str = "") -> WorkerProcess:
        worker = WorkerProcess(f"test-{os.getpid()}-{len(started)}", fault)
        started.append(worker)
        worker.start()
        return worker

    yield start
    for worker in started:
        worker.stop()


# Module scope, not session: Playwright's sync API keeps an event loop running in the main thread
# while it is open, and the trainer tests (which pytest-django runs after the database tests) call
# asyncio.run().
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).exists():
        raise RuntimeError(
            "Debian's chromium is not installed; `make test` installs it (apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    # The tests' own probes (wait_for_function) are evaluated as strings, which the pages' policy
    # refuses; test_browser_base checks the policy itself in a context of its own, which enforces it.
    context = browser.new_context(viewport={"width": 1366, "height": 800}, bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def login(page: Any, live_server: Any) -> Callable[[str], Any]:
    from tests.conftest import PASSWORD

    def do_login(username: str) -> Any:
        page.goto(live_server.url + "/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_load_state()
        return page

    return do_login


@pytest.fixture
def quick_passwords(settings: Any) -> None:
    """For tests that are not about passwords: Django's own MD5 hasher instead of PBKDF2's
    million rounds (~0.35 s per user the personas create or a login checks)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def signed_in(page: Any, live_server: Any) -> Callable[[str], Any]:
    """Signs a user in by handing the browser a session cookie: the login form's own test is in
    test_browser_base.py, and a page load plus a password hash per test adds up."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    def sign_in(username: str) -> Any:
        client = Client()
        client.force_login(get_user_model().objects.get(username=username))
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        page.context.clear_cookies()
        page.context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
        )
        return page

    return sign_in


class RayHead:
    """A real Ray head on loopback (`ray start --head --block` in its own process group)."""

    def __init__(self, temp_dir: Path) -> None:
        from webapp.embedded import free_port

        self.port = free_port()
        self.dashboard_port = free_port()
        self.temp_dir = temp_dir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        log = (self.temp_dir / "ray-head.log").open("wb")
        self.proc = subprocess.Popen(
            [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
             f"--port={self.port}", f"--dashboard-port={self.dashboard_port}", "--num-cpus=2",
             "--disable-usage-stats", "--include-dashboard=true", f"--temp-dir={self.temp_dir}",
             f"--ray-client-server-port={_free()}", f"--dashboard-agent-listen-port={_free()}",
             f"--metrics-export-port={_free()}", f"--runtime-env-agent-port={_free()}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )  # fmt: skip
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray head exited: {(self.temp_dir / 'ray-head.log').read_text()[-2000:]}")
            try:
                JobSubmissionClient(self.address).list_jobs()
                return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError("the Ray head did not answer within 90 s")

    def stop(self) -> None:
        import signal

        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        import psutil

        # Ray's own daemons may have started their own sessions; stop everything under our temp dir.
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(str(self.temp_dir) in part for part in proc.info["cmdline"] or []):
                    proc.kill()
            except psutil.Error:
                continue


def _free() -> int:
    from webapp.embedded import free_port

    return free_port()


# Ray 2.60 turns token auth on by itself when it finds ~/.ray/auth_token; the test head and every
# client of it (this process, the Celery workers it starts) run without, whatever that file holds.
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    import tempfile

    previous_auth_mode = os.environ.get(RAY_AUTH_MODE_ENV)
    os.environ[RAY_AUTH_MODE_ENV] = "disabled"
    # Ray puts unix sockets under its temp dir; keep the path short.
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    head = RayHead(temp_dir)
    try:
        head.start()
        yield head
    finally:
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if previous_auth_mode is None:
            os.environ.pop(RAY_AUTH_MODE_ENV, None)
        else:
            os.environ[RAY_AUTH_MODE_ENV] = previous_auth_mode
