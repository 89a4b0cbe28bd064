"""Whether a Ray cluster can hold what a run's backend says it reserves (``Job.needs``).

verl does not fail when a cluster is short of resources: its placement groups and TransferQueue
actors wait for them while the Ray job stays RUNNING and prints nothing. So the launcher compares
the cluster's nodes with the run's needs before it submits, and refuses with a message that names
both; the watchdog (services.reconcile) covers what is busy rather than missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.backends import ClusterNeeds


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    cpus: float
    gpus: float


def shortfall(needs: ClusterNeeds, nodes: list[NodeResources]) -> str:
    """Why ``nodes`` cannot hold the run, or "" when they can (totals, not what is free now)."""
    fitting = [n for n in nodes if n.gpus >= needs.gpus_per_node and n.cpus >= needs.cpus_per_node]
    cpus = sum(n.cpus for n in nodes)
    if len(fitting) >= needs.nodes and cpus >= needs.cpus:
        return ""
    have = ", ".join(f"{n.gpus:g} GPU(s) / {n.cpus:g} CPUs" for n in nodes) or "no alive node"
    return (
        f"the Ray cluster is too small for this run: it needs {needs.describe()}; it has "
        f"{len(nodes)} alive node(s) ({have}), {cpus:g} CPUs in all. Add nodes or lower resources.*, "
        f"or set STUDIO_VERL_PRECHECK=0 to submit anyway (the job then waits for what is missing)"
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
