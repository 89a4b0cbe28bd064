"""Each pytest-xdist worker gets its own Valkey database and its own STUDIO_VAR_DIR.

`make test` runs the suite in two xdist workers against one embedded Postgres and one Valkey.
pytest-django already gives each worker its own test database (``test_studio_gw0``, ...); the
broker is ours to split: two workers on one Valkey database would steal each other's Celery tasks,
and two on one var dir would write into each other's run folders.

Loaded with ``-p`` (pyproject's addopts) because the environment must be set before pytest-django
imports the settings, which happens before any conftest is read. Outside xdist it does nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
VALKEY_DATABASES = 16  # Valkey's default `databases`
# REDIS_URL as the launcher gave it, before this worker's database was put in.
given_redis_url = os.environ.get("REDIS_URL")


def worker_index(worker_id: str) -> int:
    """``gw3`` -> 3."""
    return int(worker_id.removeprefix("gw"))


def redis_url_for_worker(url: str, index: int) -> str:
    """The same server, database ``base + index``; refuses to run past Valkey's 16 databases."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    database = base + index
    if database >= VALKEY_DATABASES:
        raise pytest.UsageError(
            f"REDIS_URL {url} with xdist worker {index} needs Valkey database {database}; "
            f"use a lower database number in REDIS_URL or fewer workers (-n)"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    worker_id = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker_id:
        return
    index = worker_index(worker_id)
    if given_redis_url:
        os.environ["REDIS_URL"] = redis_url_for_worker(given_redis_url, index)
    var_dir = Path(os.environ.get("STUDIO_VAR_DIR") or ROOT / "var")
    os.environ["STUDIO_VAR_DIR"] = str(var_dir / worker_id)


# Ports for the servers tests start. bind(0) hands out ports from the kernel's ephemeral range, the
# same range outgoing connections use, and two xdist workers asking at once can be given the same
# port before either server binds it. So each worker takes ports from a slice of its own below that
# range (which bind(0) and connect() never hand out), and checks each one is free before handing it
# out; a random start within the slice keeps concurrent sessions of other checkouts apart.
PORT_SLICE = 700  # 16 workers (Valkey's databases) and the controller stay below 32768
_FIRST_PORT = 20_000
_next_port: list[int] = []


def free_port() -> int:
    """A loopback port no other worker of this session is given, free when handed out."""
    import random
    import socket

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    index = worker_index(worker) + 1 if worker else 0
    low = _FIRST_PORT + index * PORT_SLICE
    if not _next_port:
        _next_port.append(low + random.randrange(PORT_SLICE))
    for _ in range(PORT_SLICE):
        port = _next_port[0]
        _next_port[0] = low + (port + 1 - low) % PORT_SLICE
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {low}-{low + PORT_SLICE - 1}")
