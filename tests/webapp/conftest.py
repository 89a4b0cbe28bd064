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
    """A real `celery worker` process on the test broker and the test database."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from webapp.celery import app

        env = {**os.environ, "DATABASE_URL": _database_url_for_tests()}
        celery = str(Path(sys.executable).parent / "celery")
        self.proc = subprocess.Popen(
            [celery, "-A", "webapp", "worker", "--pool", "solo", "--loglevel", "WARNING",
             "--hostname", f"{self.name}@%h", "--without-mingle", "--without-gossip"],
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
def start_worker(transactional_db: Any) -> Iterator[Callable[[], WorkerProcess]]:
    """Starts workers on demand; every one started is stopped after the test."""
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        worker = WorkerProcess(f"test-{os.getpid()}-{len(started)}")
        started.append(worker)
        worker.start()
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture(scope="session")
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
    context = browser.new_context(viewport={"width": 1366, "height": 800})
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
