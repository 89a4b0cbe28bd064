"""What a verl run reserves on a Ray cluster, for the launcher's precheck.

verl does not fail when a cluster is short of resources: its placement groups and TransferQueue
actors wait for them while the Ray job stays RUNNING and prints nothing. So the launcher compares
the cluster's nodes with these needs before it submits (webapp/experiments/cluster.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.backend_protocol import ClusterNeeds

if TYPE_CHECKING:
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


def cluster_needs(config: RunConfig) -> ClusterNeeds:
    """The GPUs and CPUs verl's v1 trainer reserves for this run (trainer.backends.verl.command keeps
    verl's TransferQueue defaults). The job's own entrypoint holds ``resources.cpus`` for its lifetime."""
    res = config.resources
    per_node = CPUS_PER_GPU * res.gpus_per_node
    uses = {
        "the GPU workers": per_node * res.nodes,
        "TransferQueue": TQ_CONTROLLER_CPUS + TQ_STORAGE_UNITS,
        "scheduling verl's actors": SCHEDULING_CPUS,
        "the job's driver (resources.cpus)": res.cpus,
    }
    return ClusterNeeds(
        nodes=res.nodes, gpus_per_node=res.gpus_per_node, cpus_per_node=per_node, cpus_by_use=uses
    )
