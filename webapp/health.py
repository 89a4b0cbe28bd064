"""GET /healthz: the database, the broker and at least one live Celery worker (a real ping)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from webapp.celery import app as celery_app

PING_TIMEOUT_S = 1.0


def _check_database() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True}
    except Exception as exc:  # any failure means "down"; the message says why
        return {"ok": False, "error": str(exc).strip()}


def _check_broker() -> dict[str, Any]:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return {"ok": True}
    except Exception as exc:
        return {"ok": False, "error": str(exc).strip()}


def _check_workers() -> dict[str, Any]:
    try:
        replies = celery_app.control.ping(timeout=PING_TIMEOUT_S) or []
    except Exception as exc:
        return {"ok": False, "count": 0, "error": str(exc).strip()}
    names = sorted(name for reply in replies for name in reply)
    result: dict[str, Any] = {"ok": bool(names), "count": len(names), "workers": names}
    if not names:
        result["error"] = f"no Celery worker answered a ping within {PING_TIMEOUT_S} s"
    return result


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    database = _check_database()
    broker = _check_broker()
    workers = _check_workers() if broker["ok"] else {"ok": False, "count": 0, "error": "broker is down"}
    healthy = database["ok"] and broker["ok"] and workers["ok"]
    body = {
        "status": "ok" if healthy else "unavailable",
        "database": database,
        "broker": broker,
        "workers": workers,
    }
    return JsonResponse(body, status=200 if healthy else 503)
