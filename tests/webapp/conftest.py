"""Real services for web tests: a Celery worker process and Debian's Chromium through Playwright; and
a run with its token and a trainer posting to it, for the apps that read what a run produces."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.webapp.mlflow_server import mlflow_server  # noqa: F401  (a fixture: MLflow's own server)
from tests.webapp.trainer_posts import Trainer
from tests.xdist_workers import free_port

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


# The mark every process of a test Ray head carries in its environment (Ray's workers inherit the
# raylet's), so that stopping the head finds each one, wherever Ray re-parented it.
RAY_HEAD_MARK = "STUDIO_TEST_RAY_HEAD"


class RayHead:
    """A real Ray head on loopback only (`ray start --head --block` in its own process group).

    ``ray start`` replaces a loopback ``--node-ip-address`` by the machine's address (ray's
    services.resolve_ip_for_localhost) unless multi-node clusters are off, and its agents and client
    server bind to the node address: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every one on
    127.0.0.1 (a single-node head is all a test needs). The autoscaler's and the dashboard's metrics
    ports are fixed (44217, 44227) unless set: each head gets free ones, so two xdist workers' heads
    do not collide. A watchdog process stops the head when the test process dies without doing it
    (an interrupted or killed session).
    """

    def __init__(
        self, temp_dir: Path, extra_env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.extra_env = extra_env or {}  # a cluster's head: its health checks (tests/webapp/ray_cluster.py)
        self.extra_args = extra_args
        self.port = free_port()
        self.dashboard_port = free_port()
        self.temp_dir = temp_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        log = (self.temp_dir / "ray-head.log").open("wb")
        env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "AUTOSCALER_METRIC_PORT": str(free_port()),
            "DASHBOARD_METRIC_PORT": str(free_port()),
            RAY_HEAD_MARK: str(self.temp_dir),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            **self.extra_env,
        }
        self.proc = subprocess.Popen(
            [ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
             f"--port={self.port}", f"--dashboard-port={self.dashboard_port}", "--num-cpus=2",
             "--disable-usage-stats", "--include-dashboard=true", f"--temp-dir={self.temp_dir}",
             f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", "import sys; from tests.webapp.conftest import stop_when_gone; "
             "stop_when_gone(*map(int, sys.argv[1:3]), sys.argv[3])",
             str(os.getpid()), str(self.proc.pid), str(self.temp_dir)],
            cwd=ROOT, start_new_session=True,
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

    def processes(self) -> list[Any]:
        """Every live process of this head: its process tree and whatever carries its mark."""
        return ray_head_processes(str(self.temp_dir), self.proc.pid if self.proc else None)

    def stop(self) -> None:
        if self.proc is not None:
            stop_ray_head(str(self.temp_dir), self.proc.pid)
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.kill()
            self.watchdog.wait()


def ray_head_processes(mark: str, pid: int | None = None) -> list[Any]:
    import psutil

    found: dict[int, psutil.Process] = {}
    if pid is not None:
        try:
            root = psutil.Process(pid)
            found.update({p.pid: p for p in [root, *root.children(recursive=True)]})
        except psutil.Error:
            pass
    for proc in psutil.process_iter():
        try:
            if proc.pid not in found and proc.environ().get(RAY_HEAD_MARK) == mark:
                found[proc.pid] = proc
        except psutil.Error:
            continue
    return list(found.values())


def stop_ray_head(mark: str, pid: int) -> None:
    """SIGTERM to the head's process group (`ray start --block` stops its daemons), then SIGKILL to
    every process of it still alive: Ray's own daemons may have started sessions of their own."""
    import signal

    import psutil

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).wait(20)
    for proc in ray_head_processes(mark):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def stop_when_gone(parent: int, head: int, mark: str) -> None:
    """The watchdog: once the test process is gone, stop the head it left behind."""
    import psutil

    with contextlib.suppress(psutil.Error):
        watched = psutil.Process(parent)
        while watched.is_running() and watched.status() != psutil.STATUS_ZOMBIE:
            time.sleep(2)
    stop_ray_head(mark, head)


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


# -- a run with its token, and a trainer posting to it (tests/webapp/trainer_posts.py) ----------------


@pytest.fixture
def experiment(personas: Any) -> Any:
    from webapp.experiments.models import Experiment

    return Experiment.objects.create(team=personas["acme"], name="gsm8k grpo", task="gsm8k", preset="grpo")


@pytest.fixture
def run(experiment: Any) -> Any:
    from webapp.experiments.models import Run

    return Run.objects.create(
        experiment=experiment, team=experiment.team, seed=1, config={"name": "r1", "seed": 1}
    )


@pytest.fixture
def token(run: Any) -> str:
    return str(run.issue_token())


@pytest.fixture
def trainer(client: Client, run: Any, token: str) -> Trainer:
    return Trainer(client, run.pk, token)
