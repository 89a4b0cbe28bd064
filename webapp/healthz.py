"""GET /healthz: the database, the broker and at least one live Celery worker (a real ping), and,
under `make run`'s supervisor, its children: one restarting makes the answer 503 and says which
(docs/reliability.md#supervisor).

The ping's answer is kept for ``settings.HEALTH_PING_CACHE_S`` per web process, and a ping returns as
soon as as many workers answered as last time: a probe every few seconds costs milliseconds, not
the ping's whole timeout each time (docs/reliability.md#healthz).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import tenacity
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache

from webapp.celery import app as celery_app
from webapp.service_watch import RUNNING, read_status

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


_ping_lock = threading.Lock()
_last_ping: tuple[float, dict[str, Any]] | None = None  # (monotonic time, result)


def _check_workers() -> dict[str, Any]:
    global _last_ping
    # One ping at a time per process: concurrent probes wait for it and share its answer.
    with _ping_lock:
        now = time.monotonic()
        if _last_ping is not None and now - _last_ping[0] < settings.HEALTH_PING_CACHE_S:
            return _last_ping[1]
        # The first ping of a process waits the whole timeout and so counts every worker; later
        # ones stop once as many answered as before (a worker gone makes one wait it out again).
        known = _last_ping[1].get("count", 0) if _last_ping else 0
        result = _ping_workers(expected=known or None)
        _last_ping = (time.monotonic(), result)
        return result


def forget_last_ping() -> None:
    """The next check pings again (tests that stop a worker)."""
    global _last_ping
    with _ping_lock:
        _last_ping = None


# After the broker restarts, the first ping goes out on a pooled connection the broker closed ("Connection
# closed by server."); the pool drops it, so one more try on a fresh connection says whether workers answer.
@tenacity.retry(stop=tenacity.stop_after_attempt(2), reraise=True)
def _ping(expected: int | None) -> list[dict[str, Any]]:
    return celery_app.control.ping(timeout=PING_TIMEOUT_S, limit=expected) or []


def _ping_workers(expected: int | None) -> dict[str, Any]:
    try:
        replies = _ping(expected)
    except Exception as exc:
        return {"ok": False, "count": 0, "error": str(exc).strip()}
    names = sorted(name for reply in replies for name in reply)
    result: dict[str, Any] = {"ok": bool(names), "count": len(names), "workers": names}
    if not names:
        result["error"] = f"no Celery worker answered a ping within {PING_TIMEOUT_S} s"
    return result


def _check_supervised() -> dict[str, Any] | None:
    """The supervisor's children as it last wrote them; None when no supervisor of ours runs."""
    status = read_status(settings.VAR_DIR)
    if status is None:
        return None
    children = status.get("children") or {}
    down = sorted(what for what, child in children.items() if child.get("state") != RUNNING)
    result: dict[str, Any] = {"ok": not down, "children": children}
    if down:
        result["error"] = f"restarting: {', '.join(down)}"
    return result


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    database = _check_database()
    broker = _check_broker()
    workers = _check_workers() if broker["ok"] else {"ok": False, "count": 0, "error": "broker is down"}
    supervised = _check_supervised()
    healthy = database["ok"] and broker["ok"] and workers["ok"] and (supervised or {"ok": True})["ok"]
    body = {
        "status": "ok" if healthy else "unavailable",
        "database": database,
        "broker": broker,
        "workers": workers,
    }
    if supervised is not None:
        body["supervisor"] = supervised
    return JsonResponse(body, status=200 if healthy else 503)
