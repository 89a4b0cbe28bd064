"""The web tier as `make run` serves it (gunicorn with webapp/gunicorn_conf.py, one worker process)
on a Postgres of its own, under faults: slow uploads in flight, and its database stopped and started
under a live page and a live trainer.

The server gets its own embedded Postgres (not the suite's: this test stops it) and its own broker
database (its upload tasks must not reach the suite's workers). Its data is set up, and read back,
through `manage.py shell` in that environment.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import PASSWORD
from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port
from trainer.contract import CLAIMANT_HEADER, METRICS_PATH
from trainer.report.http import HttpReporter
from webapp.embedded import EmbeddedPostgres
from webapp.service_watch import ServiceWatch
from webapp.supervisor import web_command

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WORKER_TIMEOUT_S = 3  # gunicorn's worker timeout for this server; the slow uploads outlast it

SETUP = """
import json
from django.contrib.auth import get_user_model
from webapp.accounts.models import Team
from webapp.experiments.models import Experiment, Run
alice = get_user_model().objects.create_user("alice", "alice@example.com", {password!r})
team = Team.create_with_owner("Acme", alice)
experiment = Experiment.objects.create(team=team, name="outage", task="arithmetic", preset="grpo")
run = Run.objects.create(experiment=experiment, team=team, seed=1, config={{}})
run.enqueue()
token = run.issue_token()
run.claim("outage-test:1", "outage-claimant")
print(json.dumps({{"team": team.slug, "run": run.pk, "token": token}}))
"""


@dataclass
class Server:
    url: str
    env: dict[str, str]
    postgres: EmbeddedPostgres
    team: str
    run_id: int
    token: str

    def shell(self, code: str) -> Any:
        """Run Python in the server's Django environment; its last printed line, as JSON."""
        done = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=self.env,
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])

    def logged_in(self) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30)
        client.get("/accounts/login/")
        form = {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]}
        assert client.post("/accounts/login/", data=form).status_code == 302
        return client


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("web-tier")
    postgres = EmbeddedPostgres(root / "postgres", free_port(), fast=True)
    postgres.start()
    port = free_port()
    broker = os.environ["REDIS_URL"].rsplit("/", 1)[0] + "/9"
    env = {**os.environ, "DATABASE_URL": postgres.url, "REDIS_URL": broker, "STUDIO_VAR_DIR": str(root / "var"),
           "PORT": str(port), "STUDIO_WEB_THREADS": "8", "DJANGO_SETTINGS_MODULE": "webapp.settings"}  # fmt: skip
    proc = None
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env,
                       check=True, timeout=300)  # fmt: skip
        made = Server(f"http://127.0.0.1:{port}", env, postgres, "", 0, "")
        ids = made.shell(SETUP.format(password=PASSWORD))
        made.team, made.run_id, made.token = ids["team"], ids["run"], ids["token"]
        argv = [
            *web_command(port, workers=1),
            "--timeout",
            str(WORKER_TIMEOUT_S),
            "--access-logfile",
            "/dev/null",
        ]
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)
        poll_until(lambda: _answers(made.url + "/accounts/login/"))
        yield made
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        postgres.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def parquet_bytes(seed: int, rows: int = 2000) -> bytes:
    table = pa.table({
        "data_source": ["arithmetic"] * rows,
        "prompt": [[{"role": "user", "content": f"{seed}: what is {i} + {i}?"}] for i in range(rows)],
        "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(rows)],
        "extra_info": [{"index": i} for i in range(rows)],
    })  # fmt: skip
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


class SlowUpload(threading.Thread):
    """A browser on a slow link: the upload form's multipart body, a small piece at a time, up to
    half of it; the rest once ``release`` is set, and the server's answer in ``status``."""

    def __init__(self, server: Server, session: httpx.Client, content: bytes, name: str) -> None:
        super().__init__(daemon=True)
        boundary = "slowuploadboundary"
        token = session.cookies["csrftoken"]
        fields = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n{token}\r\n'
        )
        fields += f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
        fields += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}.parquet\"\r\n"
                   "Content-Type: application/octet-stream\r\n\r\n")  # fmt: skip
        self.body = fields.encode() + content + f"\r\n--{boundary}--\r\n".encode()
        cookies = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
        port = int(server.url.rsplit(":", 1)[1])
        self.head = (
            f"POST /t/{server.team}/datasets/upload/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookies}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(self.body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        self.port = port
        self.release = threading.Event()
        self.sent = threading.Event()  # the server has started reading the body
        self.status: int | None = None

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(self.head)
            position = 0
            while not self.release.is_set() and position < len(self.body) // 2:
                sock.sendall(self.body[position : position + 512])
                position += 512
                self.sent.set()
                self.release.wait(0.25)
            self.release.wait()  # half sent: the upload stays in flight until the test lets it end
            sock.sendall(self.body[position:])
            answer = sock.makefile("rb").readline()
        self.status = int(answer.split()[1])


def test_slow_uploads_longer_than_the_worker_timeout_leave_pages_and_ingestion_answering(
    server: Server,
) -> None:
    session = server.logged_in()
    uploads = [SlowUpload(server, session, parquet_bytes(seed), f"slow-{seed}") for seed in (1, 2)]
    for upload in uploads:
        upload.start()
        upload.sent.wait()
    started = time.monotonic()

    # One worker process holds both uploads; its other threads still answer everyone else.
    page = session.get(f"/t/{server.team}/runs/{server.run_id}/")
    health = httpx.get(server.url + "/healthz", timeout=30)
    points = [{"key": "reward/mean", "step": s, "value": 0.1 * s, "ts": 1.7e9 + s} for s in range(5)]
    headers = {"Authorization": f"Bearer {server.token}", CLAIMANT_HEADER: "outage-claimant"}
    ingest = httpx.post(server.url + METRICS_PATH.format(run_id=server.run_id), headers=headers,
                        json={"batch_id": "during-uploads", "points": points}, timeout=30)  # fmt: skip
    assert page.status_code == 200 and ingest.status_code == 200, ingest.text
    assert health.json()["database"]["ok"] is True
    assert all(upload.is_alive() and upload.status is None for upload in uploads)  # still in flight

    # Past the worker timeout, the uploads finish and land as datasets.
    time.sleep(max(0.0, WORKER_TIMEOUT_S + 1 - (time.monotonic() - started)))
    for upload in uploads:
        upload.release.set()
        upload.join(60)
    assert [upload.status for upload in uploads] == [302, 302]
    stored = server.shell(
        "import json; from webapp.datasets.models import Dataset; from webapp.ingestion.models import MetricPoint; "
        f"print(json.dumps([sorted(Dataset.objects.values_list('name', flat=True)), "
        f"MetricPoint.objects.filter(run_id={server.run_id}).count()]))"
    )
    assert stored == [["slow-1", "slow-2"], 5]


def test_the_database_stopped_and_started_under_a_live_page_and_a_live_trainer(
    server: Server, tmp_path: Path
) -> None:
    session = server.logged_in()
    page = f"/t/{server.team}/runs/{server.run_id}/"
    reporter = HttpReporter(
        server.url, server.run_id, server.token, claimant="outage-claimant", spool_dir=tmp_path / "spool",
        flush_interval_s=0.2, heartbeat_interval_s=0.5, backoff_initial_s=0.1, backoff_max_s=0.5,
    )  # fmt: skip
    keys = [f"outage/k{i}" for i in range(5)]
    for step in range(20):
        reporter.log_metrics(step, {key: step + i for i, key in enumerate(keys)})
        reporter.heartbeat(step, 60)
    poll_until(lambda: reporter.undelivered() == 0)

    server.postgres.stop()
    try:
        down = session.get(page)
        live = session.get(page + "?partial=live", headers={"HX-Request": "true"})
        api = httpx.post(server.url + METRICS_PATH.format(run_id=server.run_id), timeout=30,
                         headers={"Authorization": f"Bearer {server.token}"}, json={"points": []})  # fmt: skip
        health = httpx.get(server.url + "/healthz", timeout=30)
        for step in range(20, 40):  # the trainer keeps training and reporting
            reporter.log_metrics(step, {key: step + i for i, key in enumerate(keys)})
            reporter.heartbeat(step, 60)
        time.sleep(1.0)  # its sender tries, gets 503s and keeps the batches
        waiting = reporter.undelivered()
    finally:
        server.postgres.start()

    assert (down.status_code, live.status_code, api.status_code, health.status_code) == (503, 503, 503, 503)
    assert "Unavailable for a moment" in down.text and down.headers["Retry-After"]
    assert "database is unavailable" in api.json()["error"]
    assert health.json()["database"]["ok"] is False
    assert waiting > 0

    poll_until(lambda: session.get(page).status_code == 200)
    reporter.close(timeout=60)
    assert reporter.undelivered() == 0
    stored = server.shell(
        "import json; from webapp.experiments.models import Run; from webapp.ingestion.models import MetricPoint; "
        f"run = Run.objects.get(pk={server.run_id}); "
        "print(json.dumps([MetricPoint.objects.filter(run=run, key__name__startswith='outage/').count(), "
        "run.status, run.step, run.message]))"
    )
    assert stored == [40 * len(keys), "running", 39, ""]


def test_the_supervisors_watch_restarts_a_killed_postgres_and_gives_up_on_a_second_death(
    server: Server,
) -> None:
    # Last in this module: it leaves the server's Postgres dead.
    reasons: list[str] = []
    watch = ServiceWatch([server.postgres], on_give_up=reasons.append, every_s=0.2, max_restarts=1)
    watch.start()
    session = server.logged_in()
    page = f"/t/{server.team}/runs/{server.run_id}/"
    try:
        killed = server.postgres.proc
        assert killed is not None
        killed.kill()  # SIGKILL: the postmaster dies without cleaning up, as under the OOM killer
        poll_until(lambda: server.postgres.proc is not killed and server.postgres.proc.poll() is None)  # type: ignore[union-attr]
        # The web server reconnects by itself. A fresh login: this Postgres runs without synchronous
        # commits (a test's), so a crash may take the last commits, the session among them.
        poll_until(lambda: _page_answers(server, page))
        assert watch.restarts == {"embedded Postgres": 1} and watch.is_alive()

        server.postgres.proc.kill()  # type: ignore[union-attr]
        poll_until(lambda: bool(reasons))
    finally:
        watch.stop()
    assert "exited with code -9 again after 1 restarts" in reasons[0], reasons[0]
    assert str(server.postgres.log) in reasons[0] and watch.failure == reasons[0]
    assert session.get(page).status_code == 503


def _page_answers(server: Server, page: str) -> bool:
    try:
        return server.logged_in().get(page).status_code == 200
    except AssertionError:  # the login itself answered 503: the database is not back yet
        return False
