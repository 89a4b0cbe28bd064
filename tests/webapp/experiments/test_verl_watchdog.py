"""The watchdog's rules for runs whose progress is not a step counter (verl), and the precheck's sums."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from trainer.backends.verl.needs import cluster_needs
from trainer.config import RunConfig
from webapp.experiments.cluster import NodeResources, shortfall
from webapp.experiments.models import Experiment, Run, RunStatus


@pytest.fixture
def run(personas: Any) -> Run:
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="verl", config={"backend": "verl"})
    return Run.objects.create(experiment=experiment, team=team, executor="ray", config={"backend": "verl"})


def ago(seconds: float) -> Any:
    return timezone.now() - timedelta(seconds=seconds)


def test_a_heartbeat_without_progress_does_not_revive_a_stalled_run(run: Run, settings: Any) -> None:
    settings.STALL_AFTER_S = 60
    run.enqueue()
    run.claim("driver", "driver")
    Run.objects.filter(pk=run.pk).update(progress_at=ago(600))
    assert run.mark_stalled("no progress", 60)
    assert run.heartbeat(step=0, total_steps=2)
    assert run.status == RunStatus.STALLED
    assert run.heartbeat(step=1, total_steps=2)
    assert run.status == RunStatus.RUNNING


def test_trajectories_or_metrics_arriving_revive_a_stalled_run(run: Run, settings: Any) -> None:
    settings.STALL_AFTER_S = 60
    run.enqueue()
    run.claim("driver", "driver")
    Run.objects.filter(pk=run.pk).update(progress_at=ago(600), heartbeat_at=ago(600))
    assert run.mark_stalled("no progress", 60)
    run.note_progress()
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert not Run.silent_since(60).filter(pk=run.pk).exists()


def test_a_run_no_trainer_claimed_in_time_is_stalled_and_can_still_be_claimed(run: Run) -> None:
    run.enqueue()
    assert run.mark_starting("ray:job")
    assert not run.mark_stalled("pending", 60)
    Run.objects.filter(pk=run.pk).update(starting_at=ago(600))  # its start began 10 minutes ago
    assert run.mark_stalled("pending", 60)
    assert run.claim("driver", "driver")
    assert run.status == RunStatus.RUNNING
    assert not run.claim("a second driver", "a-second-driver")


def test_a_run_stalled_after_its_claim_cannot_be_claimed_again(run: Run) -> None:
    run.enqueue()
    run.claim("driver", "driver")
    Run.objects.filter(pk=run.pk).update(progress_at=ago(600))
    assert run.mark_stalled("no progress", 60)
    assert not run.claim("a second driver", "a-second-driver")
    assert run.claimed_by == "driver"


def config(gpus: int, nodes: int = 1, cpus: int = 2) -> RunConfig:
    return RunConfig.from_preset(
        "grpo",
        **{"backend": "verl", "executor": "ray", "trainer.batch_size": 8, "rollout.n": 2,
           "optim.mini_batch_size": 16, "resources.gpus_per_node": gpus, "resources.nodes": nodes,
           "resources.cpus": cpus},
    )  # fmt: skip


def test_verl_needs_three_cpus_per_gpu_and_ten_more_for_its_actors() -> None:
    needs = cluster_needs(config(gpus=4, nodes=2, cpus=2))
    assert (needs.nodes, needs.gpus_per_node, needs.cpus_per_node) == (2, 4, 12)
    assert needs.cpus == 24 + 9 + 1 + 2


def test_two_gpu_nodes_big_enough_hold_a_two_node_run() -> None:
    needs = cluster_needs(config(gpus=4, nodes=2))
    nodes = [NodeResources("head", cpus=16, gpus=0), NodeResources("a", 12, 4), NodeResources("b", 12, 4)]
    assert shortfall(needs, nodes) == ""


def test_gpus_spread_over_too_few_nodes_are_refused() -> None:
    needs = cluster_needs(config(gpus=4, nodes=2))
    nodes = [NodeResources("head", cpus=64, gpus=0), NodeResources("a", 64, 8)]
    assert "needs 2 node(s) with 4 GPU(s) and 12 CPUs each" in shortfall(needs, nodes)


def test_enough_gpus_but_too_few_cpus_in_all_are_refused() -> None:
    needs = cluster_needs(config(gpus=1))
    problem = shortfall(needs, [NodeResources("a", cpus=8, gpus=1)])
    assert "15 CPUs in all" in problem and "9 for TransferQueue" in problem and "8 CPUs in all" in problem
