"""What a verl run asks of a Ray cluster, and whether the cluster has it.

verl does not fail when a cluster is short of resources: its placement groups and TransferQueue
actors wait for them while the Ray job stays RUNNING and prints nothing. So the launcher compares
the cluster's nodes with what the run needs before it submits, and refuses with a message that
names both; the watchdog (services.reconcile) covers what is busy rather than missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.config import RunConfig

# Numbers from verl 0.9.1 and TransferQueue 0.1.11, the versions trainer/backends/verl/requirements-gpu.txt pins.
# Every GPU worker's placement-group bundle is {"CPU": max_colocate_count, "GPU": 1}, and the v1
# trainer builds its ResourcePoolManager with the default max_colocate_count = 3
# (verl/single_controller/ray/base.py: RayResourcePool.get_placement_groups, ResourcePoolManager;
# verl/trainer/ppo/v1/trainer_base.py). One placement group per node, so the CPUs are per node.
CPUS_PER_GPU = 3
# The v1 trainer always turns TransferQueue on (verl/trainer/main_ppo.py: TaskRunnerV1.run).
# Its controller is @ray.remote(num_cpus=1) (transfer_queue/controller.py) and so is each
# SimpleStorageUnit (transfer_queue/storage/simple_storage.py); verl's default is 8 storage units
# (verl/trainer/config/transfer_queue/transfer_queue.yaml: num_data_storage_units).
TQ_CONTROLLER_CPUS = 1
TQ_STORAGE_UNITS = 8
# Actors declared without num_cpus (TaskRunnerV1, AgentLoopWorker, vLLMHttpServer, the rollout
# load balancer) take one CPU to be scheduled and hold none afterwards: one must stay free.
SCHEDULING_CPUS = 1


@dataclass(frozen=True)
class VerlNeeds:
    nodes: int
    gpus_per_node: int
    cpus_per_node: int  # reserved by the GPU workers' bundles on each of those nodes
    cpus_by_use: dict[str, int]  # the whole cluster's CPUs, by what holds them

    @property
    def cpus(self) -> int:
        return sum(self.cpus_by_use.values())

    def describe(self) -> str:
        uses = ", ".join(f"{count} for {use}" for use, count in self.cpus_by_use.items())
        return (
            f"{self.nodes} node(s) with {self.gpus_per_node} GPU(s) and {self.cpus_per_node} CPUs each, "
            f"and {self.cpus} CPUs in all ({uses})"
        )


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    cpus: float
    gpus: float


def verl_needs(config: RunConfig) -> VerlNeeds:
    """The GPUs and CPUs verl's v1 trainer reserves for this run (numbers: see the constants above;
    trainer.backends.verl.command keeps verl's TransferQueue defaults). The job's own entrypoint
    holds ``resources.cpus`` for the job's lifetime."""
    res = config.resources
    per_node = CPUS_PER_GPU * res.gpus_per_node
    uses = {
        "the GPU workers": per_node * res.nodes,
        "TransferQueue": TQ_CONTROLLER_CPUS + TQ_STORAGE_UNITS,
        "scheduling verl's actors": SCHEDULING_CPUS,
        "the job's driver (resources.cpus)": res.cpus,
    }
    return VerlNeeds(
        nodes=res.nodes, gpus_per_node=res.gpus_per_node, cpus_per_node=per_node, cpus_by_use=uses
    )


def shortfall(needs: VerlNeeds, nodes: list[NodeResources]) -> str:
    """Why ``nodes`` cannot hold the run, or "" when they can (totals, not what is free now)."""
    fitting = [n for n in nodes if n.gpus >= needs.gpus_per_node and n.cpus >= needs.cpus_per_node]
    cpus = sum(n.cpus for n in nodes)
    if len(fitting) >= needs.nodes and cpus >= needs.cpus:
        return ""
    have = ", ".join(f"{n.gpus:g} GPU(s) / {n.cpus:g} CPUs" for n in nodes) or "no alive node"
    return (
        f"the Ray cluster is too small for this verl run: it needs {needs.describe()}; it has "
        f"{len(nodes)} alive node(s) ({have}), {cpus:g} CPUs in all. Add nodes or lower resources.*, "
        f"or set STUDIO_VERL_PRECHECK=0 to submit anyway (verl then waits for what is missing)"
    )


def cluster_nodes(address: str) -> list[NodeResources]:
    """The alive nodes' total CPUs and GPUs, read over the Ray dashboard's state API."""
    from ray.util.state import list_nodes

    alive = list_nodes(
        address=address, filters=[("state", "=", "ALIVE")], timeout=10, raise_on_missing_output=False
    )
    return [
        NodeResources(
            node_id=node.node_id,
            cpus=float(node.resources_total.get("CPU", 0)),
            gpus=float(node.resources_total.get("GPU", 0)),
        )
        for node in alive
    ]
