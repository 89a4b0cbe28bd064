"""The real-servers tier (docs/deployment.md#the-real-servers-tier): the product as a deployment runs it
on servers it did not start. A standalone Postgres and a standalone Redis-protocol server
(tests/webapp/real_servers.py), and against them, through DATABASE_URL and REDIS_URL only, two web
servers, two Celery workers and one beat, each started with the command line docker-compose.yml's
service runs (webapp/roles.py). Runs train for real (the tiny test model) and are driven through the
REST API with a personal token, over both web servers.

The workers carry two test hooks (``--include``): tests/webapp/experiments/worker_faults.py (a fault
armed for one launch kills the worker that takes it) and tests/webapp/reaper_meter.py (each reaper
step is slowed past the beat's tick and notes any other step in progress).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psycopg
import pytest

from tests.webapp.experiments.test_launching import tiny_config
from tests.webapp.polling import poll_until
from tests.webapp.real_servers import (
    LOOPBACK,
    PREPARE,
    TIER_MARK,
    WORKER_HOOKS,
    ProductProcess,
    StandalonePostgres,
    StandaloneValkey,
    kill_marked,
    listening_addresses,
    product_processes,
    start_watchdog,
    stop_all,
)
from tests.webapp.reaper_meter import STEPS_LOG
from tests.xdist_workers import free_port
from trainer.config import flatten_paths
from trainer.contract import IDEMPOTENCY_HEADER
from webapp.experiments.executors.base import runs_folder
from webapp.experiments.executors.local import LOG_FILE
from webapp.experiments.models import Run
from webapp.experiments.tasks import SKIPPED_TICK
from webapp.ingestion.models import MetricPoint, Trajectory

pytestmark = [pytest.mark.real_servers, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
# What each trainer process of a run logs once, as it starts (trainer/cli.py).
ONE_PER_TRAINER = "dataset downloaded into"
RESTART_STEPS = 40  # the run Postgres restarts under: long enough to be reporting when it stops
# Left out of the product's environment: the suite's own servers and the test runner's settings.
SUITE_ONLY = ("DATABASE_URL", "REDIS_URL", "STUDIO_VAR_DIR", "STUDIO_PUBLIC_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")

SETUP = """
import json
from pathlib import Path
from django.contrib.auth import get_user_model
from webapp.accounts.models import ApiToken, Team
from webapp.experiments.models import Experiment, Run
from tests.webapp.experiments.conftest import dataset_from_recipe
alice = get_user_model().objects.create_user("alice", "alice@example.com", "tier password")
team = Team.create_with_owner("Acme", alice)
datasets = dataset_from_recipe(team, "arithmetic", Path({folder!r}))
# A run the reaper watches for the whole tier, its "trainer" a sleep: in a team of its own, so that
# the team limit of Acme's runs is not its concern.
watch = Team.create_with_owner("Watch", alice)
experiment = Experiment.objects.create(team=watch, name="reaper watch", task="arithmetic", preset="grpo")
run = Run.objects.create(experiment=experiment, team=watch, seed=1, config={{}})
run.enqueue() and run.mark_starting("pgid:{pgid}") and run.claim("watch", "watch-claimant")
print(json.dumps({{"team": team.slug, "dataset": datasets["train"].pk, "token": ApiToken.issue(alice, "tier")[1]}}))
"""


@dataclass
class Tier:
    root: Path
    postgres: StandalonePostgres
    processes: list[ProductProcess]
    web_urls: list[str]
    team: str = ""
    dataset: int = 0
    token: str = ""

    def api(self, server: int) -> httpx.Client:
        """The REST API of web server ``server`` (0 or 1), as alice with her personal token."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(
            base_url=f"{self.web_urls[server]}/api/t/{self.team}", headers=headers, timeout=60
        )

    @property
    def workers(self) -> list[ProductProcess]:
        return [process for process in self.processes if process.name.startswith("worker-")]

    def create_experiment(self, name: str, seeds: list[int], steps: int = 2) -> int:
        config = tiny_config({"train": SimpleNamespace(pk=self.dataset)}, steps=steps)
        mapping = {**flatten_paths(config.model_dump(mode="json")), "name": name}
        with self.api(0) as api:
            made = api.post("/experiments", json={"config": mapping, "seeds": seeds})
        assert made.status_code == 201, made.text
        return int(made.json()["id"])

    def launch(self, experiment: int, server: int, key: str = "") -> httpx.Response:
        headers = {IDEMPOTENCY_HEADER: key} if key else {}
        with self.api(server) as api:
            return api.post(f"/experiments/{experiment}/launch", headers=headers)

    def experiment(self, experiment: int) -> dict[str, Any]:
        with self.api(0) as api:
            return dict(api.get(f"/experiments/{experiment}").json())

    def run(self, run_id: int) -> dict[str, Any]:
        with self.api(0) as api:
            return dict(api.get(f"/runs/{run_id}").json())

    def settled(self, run_id: int) -> dict[str, Any] | None:
        run = self.run(run_id)
        return run if run["finished_at"] else None

    def points(self, run_id: int, key: str) -> list[int]:
        with self.api(1) as api:
            return list(api.get(f"/runs/{run_id}/metrics/points", params={"key": key}).json()["step"])

    def row(self, run_id: int, *columns: str) -> tuple[Any, ...]:
        """Columns of the run's row, read from the tier's Postgres itself."""
        return self.sql(f"SELECT {', '.join(columns)} FROM {Run._meta.db_table} WHERE id = %s", run_id)

    def sql(self, query: str, *params: Any) -> tuple[Any, ...]:
        with psycopg.connect(self.postgres.url) as conn:
            found = conn.execute(query, params).fetchone()
        assert found is not None
        return tuple(found)

    def run_file(self, run_id: int, name: str) -> Path:
        return runs_folder(self.root / "var", SimpleNamespace(pk=run_id)) / name  # type: ignore[arg-type]

    def train_log(self, run_id: int) -> str:
        path = self.run_file(run_id, LOG_FILE)
        return path.read_text(errors="replace") if path.exists() else ""


def _product_env(root: Path, postgres: StandalonePostgres, valkey: StandaloneValkey) -> dict[str, str]:
    (root / "reaper").mkdir()
    env = {key: value for key, value in os.environ.items() if key not in SUITE_ONLY}
    return {
        **env,
        "DATABASE_URL": postgres.url,
        "REDIS_URL": valkey.url,
        "STUDIO_VAR_DIR": str(root / "var"),
        "STUDIO_WEB_WORKERS": "1",
        "STUDIO_REAP_EVERY_S": "1",
        "STUDIO_RELAUNCH_AFTER_S": "5",
        "STUDIO_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "STUDIO_TEST_WORKER_FAULT": "die-before-start",
        "STUDIO_TEST_WORKER_FAULT_ARMED": str(root / "arm-fault"),
        "STUDIO_TEST_REAPER_METER": str(root / "reaper"),
    }


def _ready(process: ProductProcess) -> bool:
    if process.proc is not None and process.proc.poll() is not None:
        raise AssertionError(
            f"{process.name} exited with {process.proc.returncode}:\n{process.output()[-3000:]}"
        )
    if process.name.startswith("worker-"):
        return " ready." in process.output()[process.started_at :]
    if process.name.startswith("web-"):
        return "Booting worker" in process.output()
    return "beat: Starting" in process.output()


def _setup(env: dict[str, str], root: Path, pgid: int) -> dict[str, Any]:
    code = SETUP.format(folder=str(root / "recipe"), pgid=pgid)
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    root = tmp_path_factory.mktemp("real-servers")
    server_env = {**os.environ, TIER_MARK: str(root)}
    watchdog = start_watchdog(str(root))
    postgres, valkey = (
        StandalonePostgres(root / "postgres", server_env),
        StandaloneValkey(root / "valkey", server_env),
    )
    made = Tier(root, postgres, [], [])
    try:
        postgres.init()
        valkey.start()
        env = {**_product_env(root, postgres, valkey), TIER_MARK: str(root)}
        with (root / "prepare.log").open("wb") as log:
            subprocess.run(
                PREPARE, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=300
            )
        ports = [free_port(), free_port()]
        made.web_urls = [f"http://{LOOPBACK}:{port}" for port in ports]
        made.processes = product_processes(root, env, ports, WORKER_HOOKS)
        for process in made.processes:
            process.start()
        sleeper = subprocess.Popen(["sleep", "3600"], env=env, start_new_session=True)
        ids = _setup(env, root, sleeper.pid)
        made.team, made.dataset, made.token = ids["team"], ids["dataset"], ids["token"]
        for process in made.processes:
            poll_until(partial(_ready, process))
        yield made
    finally:
        stop_all(made.processes)
        valkey.stop()
        postgres.stop()
        kill_marked(str(root))  # the trainers and the sleep
        watchdog.kill()
        watchdog.wait()


def _at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """The calls in threads released together, so that their requests overlap."""
    barrier = threading.Barrier(len(calls))

    def call(index: int) -> Any:
        barrier.wait()
        return calls[index]()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(call, range(len(calls))))


def test_launches_through_both_web_servers_at_once_train_each_run_exactly_once(tier: Tier) -> None:
    experiment = tier.create_experiment("both servers", seeds=[1])
    # A client retrying one launch with its key, each try landing on either web server.
    answers = _at_once([partial(tier.launch, experiment, server, "tier-launch-1") for server in (0, 1, 0, 1)])
    assert [answer.status_code for answer in answers] == [202] * 4, [a.text for a in answers]
    launched = {tuple(run["id"] for run in answer.json()) for answer in answers}
    assert len(launched) == 1  # every answer names the same run
    ((run_id,),) = launched
    replayed = sorted(answer.headers.get("Idempotent-Replayed", "") for answer in answers)
    assert replayed == ["", "true", "true", "true"]

    run = _finished(tier, run_id)
    assert run["status"] == "succeeded", run["message"]
    assert tier.row(run_id, "launch_attempts") == (1,)  # one launch task started it
    assert tier.points(run_id, "reward/mean") == [1, 2]
    assert tier.train_log(run_id).count(ONE_PER_TRAINER) == 1, tier.train_log(run_id)  # one trainer


def _dead(processes: list[ProductProcess]) -> list[ProductProcess]:
    return [process for process in processes if process.proc is not None and process.proc.poll() is not None]


def _finished(tier: Tier, run_id: int) -> dict[str, Any]:
    """The run once it ended; while Postgres comes back, a web server may answer 503 once more."""

    def settled() -> dict[str, Any] | None:
        try:
            return tier.settled(run_id)
        except (httpx.HTTPError, json.JSONDecodeError, KeyError):
            return None

    found = poll_until(settled, every_s=0.5)
    assert found is not None
    return found


@dataclass
class Relaunched:
    """A run whose launching worker was killed, started again by the reaper and training now."""

    run_id: int
    experiment: int
    killed: list[ProductProcess]
    at_kill: tuple[Any, ...]  # status, executor ref and launch attempts when the worker died


@pytest.fixture(scope="module")
def relaunched(tier: Tier) -> Relaunched:
    """One run for two tests, so that the tier trains one model fewer: the worker taking its launch
    dies; the run the reaper starts again is the one that reports through a Postgres restart."""
    (tier.root / "arm-fault").touch()  # the next launch kills the worker that takes it
    experiment = tier.create_experiment("killed worker", seeds=[1], steps=RESTART_STEPS)
    answer = tier.launch(experiment, 1)
    assert answer.status_code == 202, answer.text
    (run_id,) = [run["id"] for run in answer.json()]
    killed = poll_until(partial(_dead, tier.workers))
    at_kill = tier.row(run_id, "status", "executor_ref", "launch_attempts")
    # The other worker's reaper finds the start lost and starts it again: a trainer claims the run.
    poll_until(lambda: tier.row(run_id, "status") == ("running",), every_s=0.5)
    for process in killed:  # as the supervisor or compose's restart policy starts it again
        process.start()
        poll_until(partial(_ready, process))
    poll_until(lambda: tier.run(run_id)["step"], every_s=0.5)  # its first points arrived
    return Relaunched(run_id, experiment, killed, at_kill)


def test_a_worker_killed_mid_launch_is_recovered_by_the_other(tier: Tier, relaunched: Relaunched) -> None:
    assert len(relaunched.killed) == 1 and not (tier.root / "arm-fault").exists()
    assert relaunched.at_kill == ("starting", "", 1)  # killed after marking it starting, before a trainer
    assert tier.row(relaunched.run_id, "launch_attempts") == (2,)
    assert tier.train_log(relaunched.run_id).count(ONE_PER_TRAINER) == 1  # the second start's trainer
    assert all(_ready(process) for process in tier.workers)  # both workers take tasks again


def test_a_postgres_restart_while_a_run_reports_loses_no_point(tier: Tier, relaunched: Relaunched) -> None:
    run_id = relaunched.run_id
    reported = tier.run(run_id)["step"]
    tier.postgres.stop()
    try:
        # The trainer trains on: its reports find the web servers answering 503 and wait in its spool.
        poll_until(lambda: _trained_through_the_outage(tier, run_id, reported) or _exited(tier, run_id))
        assert _trained_through_the_outage(tier, run_id, reported), tier.train_log(run_id)
    finally:
        tier.postgres.start()

    run = _finished(tier, run_id)
    assert run["status"] == "succeeded", run["message"]
    assert tier.points(run_id, "reward/mean") == list(range(1, RESTART_STEPS + 1))
    # Every key reported at every step has all its points; every step's trajectories all arrived.
    points = MetricPoint._meta.db_table
    keys, gaps = tier.sql(
        f"SELECT count(*), count(*) FILTER (WHERE points <> %s) FROM (SELECT count(*) AS points FROM {points} "
        "WHERE run_id = %s GROUP BY key_id HAVING min(step) = 1) AS per_step_keys",
        RESTART_STEPS,
        run_id,
    )
    assert keys > 1 and gaps == 0
    config = tier.experiment(relaunched.experiment)["config"]
    per_step = config["trainer"]["batch_size"] * config["rollout"]["n"]
    trajectories = tier.sql(f"SELECT count(*) FROM {Trajectory._meta.db_table} WHERE run_id = %s", run_id)
    assert trajectories == (RESTART_STEPS * per_step,)


def _exited(tier: Tier, run_id: int) -> bool:
    return tier.run_file(run_id, "exit_code").exists()


def _trained_through_the_outage(tier: Tier, run_id: int, reported: int) -> bool:
    """A delivery failed, and the trainer logged steps past the last one delivered before."""
    log = tier.train_log(run_id)
    logged = [int(step) for step in re.findall(r"trainer\.console: step (\d+)", log)]
    return "report delivery failed" in log and max(logged, default=0) > reported + 1


def test_the_reaper_runs_one_pass_at_a_time_over_two_workers(tier: Tier) -> None:
    # Each step of a pass outlasts the beat's tick (the watched run is always there), so ticks fall on
    # the other worker, or the other pool process, while a pass runs. Only the steps from here on are
    # judged: a Postgres restart earlier in the tier drops the lock with the connection that held it,
    # so a pass dying with its connection may have met the next one.
    start, skipped = len(_reaper_steps(tier)), _skipped_ticks(tier)

    def steps() -> list[tuple[int, int]]:
        return _reaper_steps(tier)[start:]

    def overlapped() -> bool:
        return any(others for _, others in steps())

    poll_until(lambda: overlapped() or (len(steps()) >= 6 and _skipped_ticks(tier) > skipped))
    assert not overlapped(), steps()  # no step of a pass ever ran beside another
    assert _skipped_ticks(tier) > skipped  # the tick that met a pass in progress found its lock held


def test_every_server_and_process_of_the_tier_listens_on_loopback_only(tier: Tier) -> None:
    assert listening_addresses(str(tier.root)) == {LOOPBACK}


def _reaper_steps(tier: Tier) -> list[tuple[int, int]]:
    """(worker pid, steps in progress beside it) of each reaper step so far (tests/webapp/reaper_meter.py)."""
    log = tier.root / "reaper" / STEPS_LOG
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(pid), int(others)) for pid, others in (line.split() for line in lines)]


def _skipped_ticks(tier: Tier) -> int:
    return sum(worker.output().count(SKIPPED_TICK) for worker in tier.workers)
