"""A three-node Ray cluster on this machine's loopback: a head and two worker nodes, each its own
``ray start`` (its own raylet, object store and resources), for the multi-node tests
(docs/ray.md#several-nodes).

Every node offers 2 CPUs and a custom resource named after it (``node_head``, ``node_a``,
``node_b``), so a run that asks for one lands on that node; the worker nodes also offer
``worker_node``, so a run asking for it lands on either. ``ray start`` refuses to join a worker
node while multi-node clusters are off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps the
head's daemons on 127.0.0.1), and turns a loopback ``--node-ip-address`` into the machine's
address when they are on: ``python -m tests.webapp.ray_worker_start`` runs ``ray start`` with the first
check passed and the second left out, in that process only; the node's daemons keep the loopback
setting. The head's health checks are fast, so a lost node is declared dead within seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.webapp.conftest import RAY_AUTH_MODE_ENV, RAY_HEAD_MARK, ROOT, RayHead, ray_head_processes
from tests.xdist_workers import free_port

NODE_MARK = "STUDIO_TEST_RAY_NODE"  # each node's name, in the environment of every process of it
CPUS_PER_NODE = 2
WORKER_NODE = "worker_node"  # a custom resource every worker node offers and the head does not
# The GCS checks each raylet every second and declares it dead after 3 missed answers.
HEALTH_CHECKS = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "1000",
}


def node_resource(name: str) -> str:
    """The custom resource only the node ``name`` offers (what the run form's "where to run" names)."""
    return f"node_{name}"


@dataclass
class WorkerNode:
    name: str
    proc: subprocess.Popen[bytes] | None = None

    def processes(self, mark: str) -> list[Any]:
        """Every live process of this node (its daemons and workers carry its name)."""
        return [
            proc
            for proc in ray_head_processes(mark)
            if _environ(proc).get(NODE_MARK) == self.name or (self.proc and proc.pid == self.proc.pid)
        ]

    def raylet(self, mark: str) -> Any:
        """This node's raylet process (None once it is gone)."""
        return next((proc for proc in self.processes(mark) if _name(proc) == "raylet"), None)

    def stop(self, mark: str) -> None:
        """SIGTERM to its `ray start --block` (which stops its daemons), then SIGKILL to what is left."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        for proc in self.processes(mark):
            with contextlib.suppress(Exception):
                proc.kill()


def _environ(proc: Any) -> dict[str, str]:
    try:
        return dict(proc.environ())
    except Exception:  # gone, or a zombie
        return {}


def _name(proc: Any) -> str:
    try:
        return str(proc.name())
    except Exception:
        return ""


@dataclass
class RayCluster:
    head: RayHead
    workers: list[WorkerNode] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.head.address

    @property
    def mark(self) -> str:
        return str(self.head.temp_dir)

    def start_worker(self, name: str) -> WorkerNode:
        log = (self.head.temp_dir / f"ray-{name}.log").open("wb")
        env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            RAY_HEAD_MARK: self.mark,
            NODE_MARK: name,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        }
        ports = [
            "--node-manager-port", "--object-manager-port", "--metrics-export-port",
            "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
        ]  # fmt: skip
        node = WorkerNode(name)
        node.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.webapp.ray_worker_start", "start", "--block",
             f"--address=127.0.0.1:{self.head.port}", "--node-ip-address=127.0.0.1", f"--node-name={name}",
             f"--num-cpus={CPUS_PER_NODE}", f"--resources={json.dumps({node_resource(name): 1, WORKER_NODE: 1})}",
             "--disable-usage-stats", *[f"{port}={free_port()}" for port in ports]],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=ROOT,
        )  # fmt: skip
        self.workers.append(node)
        return node

    def alive_nodes(self) -> list[Any]:
        from ray.util.state import list_nodes

        return list_nodes(
            address=self.address, filters=[("state", "=", "ALIVE")], timeout=10, raise_on_missing_output=False
        )

    def join(self, name: str, attempts: int = 3) -> None:
        """Start the worker node ``name`` and wait until the head counts it alive. ``ray start`` gives
        a raylet 30 s to register, which a busy machine can exceed: then it exits, and is tried again."""
        for _ in range(attempts):
            node = self.start_worker(name)
            if self._wait_alive(name, node):
                return
            self.workers.remove(node)
        log = (self.head.temp_dir / f"ray-{name}.log").read_text()[-2000:]
        raise RuntimeError(f"ray node {name} did not join in {attempts} attempts: {log}")

    def _wait_alive(self, name: str, node: WorkerNode) -> bool:
        assert node.proc is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if name in {alive.node_name for alive in self.alive_nodes()}:
                    return True
            if node.proc.poll() is not None:
                node.stop(self.mark)  # what that start left running
                return False
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        for node in self.workers:
            node.stop(self.mark)
        self.head.stop()  # and every process still carrying the cluster's mark


@contextlib.contextmanager
def ray_cluster(worker_names: tuple[str, ...] = ("a", "b")) -> Iterator[RayCluster]:
    previous_auth_mode = os.environ.get(RAY_AUTH_MODE_ENV)
    os.environ[RAY_AUTH_MODE_ENV] = "disabled"
    temp_dir = Path(tempfile.mkdtemp(prefix="rayc", dir="/tmp"))  # Ray's unix sockets: a short path
    head = RayHead(
        temp_dir,
        extra_env=HEALTH_CHECKS,
        extra_args=(f"--resources={json.dumps({node_resource('head'): 1})}", "--node-name=head"),
    )
    cluster = RayCluster(head)
    try:
        head.start()
        for name in worker_names:  # one after the other: each start is heavy on a small machine
            cluster.join(name)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        if previous_auth_mode is None:
            os.environ.pop(RAY_AUTH_MODE_ENV, None)
        else:
            os.environ[RAY_AUTH_MODE_ENV] = previous_auth_mode
