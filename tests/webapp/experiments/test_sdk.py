"""The `studio` SDK against the web tier as `make run` serves it (gunicorn, on the test database): a
script written for W&B's API with only its import line changed logs a run the runs table, the curves
and the run page show; the same script with the server killed mid-run, and with the server stopped
from the start, keeps its run in a folder that `studio sync` brings in once (docs/sdk.md)."""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from django.db import connection
from django.test import Client

from tests.webapp.polling import poll_until
from tests.xdist_workers import free_port
from trainer.report.spool import spool_files
from trainer.studio.cli import main
from trainer.studio.run_folder import RunFolder
from trainer.studio.sdk import BATCH_POINTS, FLUSH_INTERVAL_S
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.sdk_runs import CLIENT_ID_TAG, GROUP_TAG
from webapp.ingestion.models import MetricPoint, Trajectory
from webapp.supervisor import web_command

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
STEPS = 300  # x 2 keys

# A script for wandb's API; `import studio as wandb` is the one line that differs. PAUSE_AT lets the
# test stop the server while it runs: the script waits there for the file GO.
SCRIPT = textwrap.dedent("""
    import os, pathlib, time
    import studio as wandb  # was: import wandb

    run = wandb.init(project="sdk demo", name=os.environ["RUN_NAME"], group="baselines", job_type="train",
                     tags=["sdk"], config={"lr": 0.01, "model": {"layers": 2}})
    for step in range(STEPS):
        if step == int(os.environ.get("PAUSE_AT", "-1")):
            pathlib.Path("PAUSED").touch()
            while not pathlib.Path("GO").exists():
                time.sleep(0.05)
        wandb.log({"loss": 1.0 / (step + 1), "acc": step / STEPS})
    run.summary["best_acc"] = 0.99
    run.log_trajectory("What is 2+2?", [
        {"response": "<tool_call>calculator 2+2</tool_call>",
         "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}, "result": "4"}]},
        {"response": "4", "reward": 1.0},
    ])
    run.log_artifact(__file__)
    print("offline" if run.offline else run.url)
    wandb.finish()
""").replace("STEPS", str(STEPS))


class Gunicorn:
    """Our web tier on the test database (transactional: the test's rows are committed), on one port
    it can be stopped and started on again."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        database = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
        self.env = {
            **os.environ,
            "DATABASE_URL": database,
            "STUDIO_VAR_DIR": str(tmp_path),
            "PORT": str(self.port),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [*web_command(self.port, workers=1), "--access-logfile", "/dev/null"]
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, start_new_session=True)
        poll_until(self._answers)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(20)
            self.proc = None

    def _answers(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "gunicorn exited"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/accounts/login/")
            return conn.getresponse().status == 200
        except OSError:
            return False


@pytest.fixture
def server(transactional_db: Any, tmp_path: Path) -> Iterator[Gunicorn]:
    served = Gunicorn(tmp_path / "server")
    served.start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def studio_env(
    personas: Any, server: Gunicorn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    token = ApiToken.issue(personas["alice"], "sdk")[1]
    settings = {
        "STUDIO_URL": server.url,
        "STUDIO_TOKEN": token,
        "STUDIO_TEAM": "acme",
        "STUDIO_DIR": str(tmp_path / "runs"),
        "STUDIO_FINISH_TIMEOUT": "2",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)  # for `studio sync`, in this process
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    # `import studio` as pyproject installs it (trainer/toplevel), before the venv is reinstalled.
    path = os.pathsep.join([str(ROOT), str(ROOT / "trainer" / "toplevel")])
    return {**os.environ, **settings, "PYTHONPATH": path}


def start_script(env: dict[str, str], workdir: Path, name: str, **extra: str) -> subprocess.Popen[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "train.py").write_text(SCRIPT)
    return subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=workdir,
        env={**env, "RUN_NAME": name, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(script: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = script.communicate(timeout=300)
    assert script.returncode == 0, err
    return out, err


def studio(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, (result.output, result.stderr)
    return result.stdout


def run_named(name: str) -> Run:
    return Run.objects.get(name=name)


def test_a_wandb_script_with_only_its_import_changed_logs_a_run_the_pages_show(
    studio_env: dict[str, str], server: Gunicorn, personas: Any, tmp_path: Path, settings: Any
) -> None:
    out, _ = finished(start_script(studio_env, tmp_path / "online", "online demo"))
    run = run_named("online demo")
    assert out.strip() == f"{studio_env['STUDIO_URL']}/t/acme/runs/{run.pk}/"
    assert run.is_external and run.status == RunStatus.SUCCEEDED and run.experiment.name == "sdk demo"
    assert MetricPoint.objects.filter(run=run).count() == 2 * STEPS
    params, tags = (
        dict(run.logged.params().values_list("key", "value")),
        dict(run.logged.tags().values_list("key", "value")),
    )
    assert params == {"lr": "0.01", "model.layers": "2"}
    assert tags["summary.best_acc"] == "0.99" and tags[GROUP_TAG] == "baselines" and CLIENT_ID_TAG in tags
    assert run.labels == ["sdk"]
    (trajectory,) = Trajectory.objects.filter(run=run)
    assert trajectory.total_reward == 1.0 and trajectory.steps.count() == 2
    folder = RunFolder(next((tmp_path / "runs").iterdir()))
    assert folder.read().synced and not spool_files(folder.spool)

    browser = Client()
    browser.force_login(personas["alice"])
    assert "online demo" in browser.get("/t/acme/runs/").content.decode()
    # The run page reads the artifact from where the server stored it (its own var folder).
    settings.VAR_DIR = server.env["STUDIO_VAR_DIR"]
    page = browser.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "online demo" in page and "train.py" in page  # the artifact, listed
    assert "loss" in browser.get(f"/t/acme/runs/{run.pk}/curves/").content.decode()
    bearer = f"Bearer {studio_env['STUDIO_TOKEN']}"
    curve = browser.get(
        f"/api/t/acme/runs/{run.pk}/metrics/curve", {"keys": "loss"}, HTTP_AUTHORIZATION=bearer
    ).json()
    assert len(curve["series"][0]["value"]) == STEPS


def test_a_run_whose_server_dies_midway_or_is_down_is_kept_and_synced_once(
    studio_env: dict[str, str], server: Gunicorn, tmp_path: Path
) -> None:
    midway = start_script(studio_env, tmp_path / "midway", "killed midway", PAUSE_AT=str(STEPS // 2))
    poll_until(lambda: (tmp_path / "midway" / "PAUSED").exists() or midway.poll() is not None)
    server.stop()  # the script goes on logging with the server gone
    (tmp_path / "midway" / "GO").touch()
    _, err = finished(midway)
    assert "studio sync" in err
    offline, err = finished(start_script(studio_env, tmp_path / "offline", "down from the start"))
    assert offline.strip() == "offline"

    server.start()
    midway_run = run_named("killed midway")
    assert midway_run.status == RunStatus.RUNNING  # its end is in the folder, not sent
    assert MetricPoint.objects.filter(run=midway_run).count() < 2 * STEPS
    assert not Run.objects.filter(name="down from the start").exists()
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "runs", copy)
    synced = studio("sync", str(tmp_path / "runs"))
    assert synced.count("batches sent") == 2
    for name in ("killed midway", "down from the start"):
        run = run_named(name)
        assert run.status == RunStatus.SUCCEEDED, name
        assert MetricPoint.objects.filter(run=run).count() == 2 * STEPS, name
        assert Trajectory.objects.filter(run=run).count() == 1
        assert dict(run.logged.tags().values_list("key", "value"))["summary.best_acc"] == "0.99"

    again = studio("sync", str(tmp_path / "runs"))
    assert again.count("already synced") == 2
    stale = studio("sync", str(copy))  # a copy taken before: its runs have ended, nothing is stored twice
    assert stale.count("an ended run takes no writes") == 2
    assert (
        MetricPoint.objects.filter(run__name__in=["killed midway", "down from the start"]).count()
        == 4 * STEPS
    )
    assert Run.objects.filter(experiment__name="sdk demo").count() == 2


# Logs a full batch offline, then a few points more than a flush interval apart, says so, and waits
# to be killed: it never reaches finish(). The last log call spools what waited before it.
DYING_SCRIPT = (
    textwrap.dedent("""
    import pathlib, time
    import studio

    run = studio.init(project="sdk demo", name="killed offline", mode="offline")
    for step in range(BATCH_POINTS // 2):
        run.log({"loss": 1.0 / (step + 1), "acc": 0.5})
    run.log({"loss": 0.1, "acc": 0.9})
    time.sleep(FLUSH_INTERVAL_S * 1.5)
    run.log({"loss": 0.05, "acc": 0.95})
    pathlib.Path("LOGGED").touch()
    while True:
        time.sleep(1)
""")
    .replace("BATCH_POINTS", str(BATCH_POINTS))
    .replace("FLUSH_INTERVAL_S", str(FLUSH_INTERVAL_S))
)


def test_sync_leaves_a_live_script_running_and_fails_the_run_of_a_killed_one(
    studio_env: dict[str, str], tmp_path: Path
) -> None:
    workdir = tmp_path / "dying"
    workdir.mkdir()
    (workdir / "train.py").write_text(DYING_SCRIPT)
    script = subprocess.Popen([sys.executable, "train.py"], cwd=workdir, env=studio_env)
    try:
        poll_until(lambda: (workdir / "LOGGED").exists() or script.poll() is not None)
        assert script.poll() is None
        assert "has not finished it" in studio("sync")  # its process lives: still being written
        run = run_named("killed offline")
        assert run.status == RunStatus.RUNNING
    finally:
        script.kill()  # kill -9: no finish(), no exit hook
        script.wait(30)

    synced = studio("sync")
    run.refresh_from_db()
    assert "failed: its script never finished it" in synced
    assert run.status == RunStatus.FAILED and "never finished" in run.message
    assert f"process {script.pid}" in run.message
    assert MetricPoint.objects.filter(run=run).count() == BATCH_POINTS + 4  # what waited a second or more
    assert "already synced" in studio("sync")


# Runs each ```python block of docs/sdk.md in turn, each in a namespace of its own, in one process.
DOCS_RUNNER = """
import re, sys
for block in re.findall(r"```python\\n(.*?)```", open(sys.argv[1]).read(), re.S):
    exec(compile(block, "docs/sdk.md", "exec"), {"__name__": "__main__"})
"""


def test_the_docs_examples_run(studio_env: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DOCS_RUNNER, str(ROOT / "docs" / "sdk.md")],
        cwd=tmp_path,
        env=studio_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    names = {"quick start", "nightly", "a rollout"}
    assert (
        set(Run.objects.filter(name__in=names, status=RunStatus.SUCCEEDED).values_list("name", flat=True))
        == names
    )
    assert Trajectory.objects.filter(run__name="a rollout").count() == 1
    (offline,) = [
        folder for folder in (tmp_path / "runs").iterdir() if RunFolder(folder).read().name == "offline"
    ]
    assert str(offline) in done.stdout and not RunFolder(offline).read().synced
