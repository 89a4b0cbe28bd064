from __future__ import annotations

from typing import Any

import pytest

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
