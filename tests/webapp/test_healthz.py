from __future__ import annotations

from typing import Any

import psutil
import pytest
import redis

from tests.xdist_workers import free_port
from webapp.celery import app as celery_app
from webapp.healthz import forget_last_ping


@pytest.fixture(autouse=True)
def fresh_ping() -> None:
    forget_last_ping()  # each test starts without another test's cached worker ping


@pytest.mark.slow
def test_healthz_is_200_only_while_a_worker_answers(client: Any, start_worker: Any) -> None:
    worker = start_worker()
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["database"]["ok"] and body["broker"]["ok"]
    assert body["workers"]["count"] >= 1

    worker.stop()
    forget_last_ping()  # the answer is kept for HEALTH_PING_CACHE_S; the next probe pings again
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 503
    assert body["workers"]["ok"] is False
    assert "no Celery worker" in body["workers"]["error"]


def test_healthz_reports_a_dead_broker(client: Any, db: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(celery_app.conf, "broker_url", f"redis://127.0.0.1:{free_port()}/0")
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 503
    assert body["database"]["ok"] is True
    assert body["broker"]["ok"] is False
    assert body["broker"]["error"]


def test_probes_in_a_row_share_one_worker_ping(
    client: Any, start_worker: Any, monkeypatch: Any, settings: Any
) -> None:
    start_worker()
    pings: list[Any] = []
    ping = celery_app.control.ping

    def counted(*args: Any, **kwargs: Any) -> Any:
        pings.append(kwargs.get("limit"))
        return ping(*args, **kwargs)

    monkeypatch.setattr(celery_app.control, "ping", counted)
    bodies = [client.get("/healthz").json() for _ in range(5)]
    assert all(body["workers"]["ok"] and body["database"]["ok"] for body in bodies)
    assert pings == [None]  # the first ping waits out its timeout and counts the workers
    settings.HEALTH_PING_CACHE_S = 0  # the kept answer is out of date from here on
    assert client.get("/healthz").json()["workers"]["ok"]
    assert pings == [None, bodies[0]["workers"]["count"]]  # later ones stop once as many answered


@pytest.mark.slow
def test_a_probe_after_the_broker_dropped_its_connections_still_finds_the_worker(
    client: Any, start_worker: Any, settings: Any
) -> None:
    start_worker()
    assert client.get("/healthz").json()["workers"]["ok"]  # the ping's connection is now pooled
    _broker_closes_this_process_connections(settings.CELERY_BROKER_URL)  # as a broker restart does
    forget_last_ping()
    body = client.get("/healthz").json()
    assert body["status"] == "ok", body


def _broker_closes_this_process_connections(broker_url: str) -> None:
    """CLIENT KILL of every connection this process holds to the broker; other processes keep theirs."""
    broker = redis.Redis.from_url(broker_url)
    port = broker.connection_pool.connection_kwargs["port"]
    mine = {
        f"{conn.laddr.ip}:{conn.laddr.port}"
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port
    }
    for client in broker.client_list():
        if client["addr"] in mine:
            broker.client_kill(client["addr"])
    broker.close()
