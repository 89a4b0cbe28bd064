"""Runs on a three-node Ray cluster on loopback (tests/webapp/ray_cluster.py): a run asking for a
node's resource lands there and its page names the node; a sweep of six spreads over the nodes and
the rest wait in Ray's queue; a node lost while a run trains fails the run with the node and the
step, keeps what the run reported and its checkpoints, and Resume continues it on a node that is
left (docs/ray.md#several-nodes, docs/ray.md#a-lost-node).

The reaper's step (services.reconcile) runs here in the test process, as in test_ray_faults.py. The
lost-node test kills a node: it is the module's last.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.urls import reverse

from tests.webapp.conftest import ray_head_processes
from tests.webapp.experiments.test_launching import tiny_config
from tests.webapp.experiments.test_ray_faults import _is_loopback
from tests.webapp.polling import poll_until
from tests.webapp.ray_cluster import CPUS_PER_NODE, WORKER_NODE, RayCluster, node_resource, ray_cluster
from trainer.config import RunConfig
from webapp.experiments import services, sweeps
from webapp.experiments.executors import WAITING_FOR_RESOURCES
from webapp.experiments.models import Experiment, Run, RunStatus, TeamRunLimit
from webapp.ingestion.models import MetricPoint
from webapp.results.resume import resume

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster() as started:
        yield started


@pytest.fixture
def on_cluster(cluster: RayCluster, live_server: Any, settings: Any) -> RayCluster:
    """Runs go to the cluster, and their trainers report to this live server."""
    settings.RAY_ADDRESS, settings.PUBLIC_URL = cluster.address, live_server.url
    return cluster


LOST_STEPS = 60


def cluster_config(datasets: dict[str, Any], *, steps: int = 2, **changes: Any) -> RunConfig:
    """The cheapest trainer config the Ray tests use, holding a whole node's CPUs."""
    config = tiny_config(datasets, executor="ray", steps=steps)
    return config.with_overrides(**{"resources.cpus": CPUS_PER_NODE, **changes})


def reap_until_ended(runs: list[Run]) -> list[Run]:
    """The reaper's steps until every run has ended; the runs as they ended."""
    ids = [run.pk for run in runs]

    def ended() -> bool:
        for run in Run.objects.filter(pk__in=ids):
            services.reconcile(run)
        return all(run.is_terminal for run in Run.objects.filter(pk__in=ids))

    poll_until(ended, every_s=0.5)
    return list(Run.objects.filter(pk__in=ids).order_by("pk"))


def launched(personas: Any, config: RunConfig) -> Run:
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    (run,) = experiment.launch().runs
    services.start_run(run)  # the launch task's work, here
    run.refresh_from_db()
    return run


def listening_sockets(cluster: RayCluster) -> list[tuple[str, str, int]]:
    found = []
    for proc in ray_head_processes(cluster.mark):
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr:
                    found.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def test_each_of_the_three_nodes_has_its_own_raylet_and_every_socket_is_on_loopback(
    cluster: RayCluster,
) -> None:
    nodes = {node.node_name: node for node in cluster.alive_nodes()}
    assert sorted(nodes) == ["a", "b", "head"]
    for name, node in nodes.items():
        assert node.node_ip == "127.0.0.1"
        assert node.resources_total[node_resource(name)] == 1 and node.resources_total["CPU"] == CPUS_PER_NODE
    sockets = listening_sockets(cluster)
    raylets = {port for name, _, port in sockets if name == "raylet"}
    assert len(raylets) >= 3, sockets  # one raylet (at least one port each) per node
    assert [s for s in sockets if not _is_loopback(s[1])] == []


def test_a_run_asking_for_a_nodes_resource_runs_there_and_its_page_names_the_node(
    personas: Any, arithmetic: Any, on_cluster: RayCluster, client: Any
) -> None:
    run = launched(personas, cluster_config(arithmetic, **{"resources.where": {node_resource("b"): 1}}))
    (ended,) = reap_until_ended([run])
    assert ended.status == RunStatus.SUCCEEDED, ended.message
    assert ended.node.startswith("b, 127.0.0.1 · "), ended.node
    client.force_login(personas["alice"])
    page = client.get(reverse("run", args=[ended.team.slug, ended.pk])).content.decode()
    assert f'<dd id="run-node">{ended.node}</dd>' in page


def test_a_sweep_of_six_spreads_over_the_nodes_and_the_rest_wait_in_rays_queue(
    personas: Any, arithmetic: Any, on_cluster: RayCluster, client: Any
) -> None:
    team = personas["acme"]
    TeamRunLimit.set(team, 2)  # counts this machine's runs: a Ray run is the cluster's to place
    spec = sweeps.SweepSpec.model_validate(
        {"name": "six", "config": cluster_config(arithmetic).model_dump(), "seeds": [1, 2, 3, 4, 5, 6]}
    )
    sweep = sweeps.create_sweep(team, personas["alice"], spec)
    runs = list(sweep.runs().order_by("pk"))
    for run in runs:
        services.start_run(run)
    started = Run.objects.filter(pk__in=[run.pk for run in runs])
    assert {run.status for run in started} == {RunStatus.STARTING}  # none held back by the team's limit
    assert not any(run.held_at for run in started)
    waiting = f"{WAITING_FOR_RESOURCES} {CPUS_PER_NODE} CPU"
    seen_waiting: set[int] = set()

    def three_wait() -> bool:
        for run in started.filter(status=RunStatus.STARTING):
            services.reconcile(run)
        seen_waiting.update(started.filter(message=waiting).values_list("pk", flat=True))
        return len(seen_waiting) >= 3

    poll_until(three_wait, every_s=0.5)  # 3 nodes, one 2-CPU run each: the other three wait
    client.force_login(personas["alice"])
    page = client.get(reverse("sweep", args=[team.slug, sweep.pk])).content.decode()
    assert waiting in page
    ended = reap_until_ended(runs)
    assert [run.status for run in ended] == [RunStatus.SUCCEEDED] * 6, [run.message for run in ended]
    assert {run.node.split(",")[0] for run in ended} == {"head", "a", "b"}
    assert all(run.launch_attempts == 1 for run in ended)  # no run started twice
    page = client.get(reverse("sweep", args=[team.slug, sweep.pk])).content.decode()
    assert all(f"on {run.node}" in page for run in ended)


def checkpoints(run: Run) -> list[Path]:
    folder = Path(run.config["trainer"]["checkpoint_dir"])
    steps = folder.glob("step_*") if folder.exists() else []
    return sorted(
        path for path in steps if path.name.removeprefix("step_").isdigit()
    )  # not one being written


def test_a_node_lost_while_a_run_trains_fails_the_run_keeps_what_it_had_and_resume_continues_elsewhere(
    personas: Any, arithmetic: Any, on_cluster: RayCluster
) -> None:
    # trainer.resume needs a checkpoint folder to be valid; the launch sets the run's own.
    resumable = {"trainer.save_every": 1, "trainer.resume": True, "trainer.checkpoint_dir": "/set-at-launch"}
    # On either worker node: the one it lands on is lost, and the other one is left for the resume.
    # 60 tiny steps: on a loaded machine the reaper's polls are slow, and a short run could end before
    # the kill below lands.
    run = launched(
        personas,
        cluster_config(arithmetic, steps=LOST_STEPS, **{"resources.where": {WORKER_NODE: 1}}, **resumable),
    )

    def checkpointed() -> Run | None:
        services.reconcile(Run.objects.get(pk=run.pk))
        found = Run.objects.get(pk=run.pk)
        assert not found.is_terminal, f"the run ended ({found.status}) before its node could be lost"
        return found if found.node and found.step >= 2 and checkpoints(found) else None

    placed = poll_until(checkpointed, every_s=0.5)
    (lost,) = [node for node in on_cluster.workers if placed.node.startswith(f"{node.name},")] or [None]
    assert lost is not None, f"the test needs the run on a worker node, not {placed.node}"
    lost.raylet(on_cluster.mark).kill()  # kill -9: the node is gone
    reported = MetricPoint.objects.filter(run=run).count()
    (ended,) = reap_until_ended([run])
    assert ended.status == RunStatus.FAILED
    # The step the run had reached when the loss was seen; a batch the dying trainer sent just before
    # may still land after it, so the run's own step can be one later.
    said = re.fullmatch(rf"node {lost.name} lost at step (\d+)", ended.message)
    assert said and placed.step <= int(said[1]) <= ended.step, ended.message
    assert MetricPoint.objects.filter(run=run).count() >= reported > 0  # nothing reported is lost
    (latest,) = checkpoints(ended)  # keep_checkpoints: the newest complete one
    assert (latest / "trainer_state.json").exists() and (latest / "optimizer.pt").exists()
    resumed = resume(ended, personas["alice"])
    assert resumed.step == int(latest.name.removeprefix("step_"))
    services.start_run(Run.objects.get(pk=run.pk))
    (again,) = reap_until_ended([run])
    assert again.status == RunStatus.SUCCEEDED, again.message
    assert again.step == LOST_STEPS and not again.node.startswith(f"{lost.name},"), again.node
