from __future__ import annotations

from typing import Any

from webapp.celery import app as celery_app
from webapp.embedded import free_port


def test_healthz_is_200_only_while_a_worker_answers(client: Any, start_worker: Any) -> None:
    worker = start_worker()
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["database"]["ok"] and body["broker"]["ok"]
    assert body["workers"]["count"] >= 1

    worker.stop()
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
