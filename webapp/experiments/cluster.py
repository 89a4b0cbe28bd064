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


@dataclass(frozen=True)
class NodePlace:
    """The node a Ray job's driver ran on, as the run page and a lost-node message name it."""

    node_id: str
    name: str  # `ray start --node-name`; Ray's default is the node's IP address
    ip: str
    alive: bool

    def describe(self) -> str:
        where = self.ip if self.name == self.ip else f"{self.name}, {self.ip}"
        return f"{where} · {self.node_id[:8]}"


def node_place(address: str, node_id: str) -> NodePlace | None:
    """The node ``node_id`` of the cluster, alive or dead; None when the cluster does not know it."""
    from ray.util.state import get_node

    node = get_node(node_id, address=address, timeout=10)
    if node is None:
        return None
    return NodePlace(node.node_id, node.node_name or node.node_ip, node.node_ip, node.state == "ALIVE")


def asked_resources(
    cpus: float | None, gpus: float | None, memory: int | None, custom: dict[str, float] | None
) -> str:
    """What a Ray job's entrypoint waits for, as "2 CPU, 1 GPU, 4 GiB memory, 1 node_a"."""
    parts = [f"{cpus:g} CPU"] if cpus else []
    parts += [f"{gpus:g} GPU"] if gpus else []
    parts += [f"{memory / 2**30:g} GiB memory"] if memory else []
    parts += [f"{amount:g} {name}" for name, amount in (custom or {}).items()]
    return ", ".join(parts) or "nothing named"
