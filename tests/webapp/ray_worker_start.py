"""``ray start`` for a worker node of the test cluster that stays on loopback
(tests/webapp/ray_cluster.py says why): ``python -m tests.webapp.ray_worker_start start ...``."""

from __future__ import annotations

import sys


def main() -> None:
    from ray._private import ray_constants, services

    ray_constants.ENABLE_RAY_CLUSTER = True  # lets a worker node join; its daemons keep the env's 0
    services.resolve_ip_for_localhost = lambda host: host  # keeps --node-ip-address=127.0.0.1
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", *sys.argv[1:]]
    ray_main()


if __name__ == "__main__":
    main()
