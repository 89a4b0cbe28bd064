"""While the database is away, every request gets a 503 with Retry-After instead of a 500
(docs/reliability.md#database-down): a browser shows a page that says so, the trainer's reporter and
MLflow clients retry a 503 (keeping what they have), and nothing claims a bug.

:class:`DatabaseUnavailableMiddleware` sits outermost but for SecurityMiddleware. A view's database
error reaches its ``process_exception``; one raised by a middleware further in (the session, the
current team) has already been turned into a 500 by Django, so the ``got_request_exception`` signal,
sent while that exception is being handled, marks the request and the middleware replaces the 500.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from trainer.contract import API_ROOT, MLFLOW_ROOT

logger = logging.getLogger(__name__)

# Connection failures: refused, reset, closed under us. Not IntegrityError, DataError and their kin,
# which are about the request and answered as such.
DATABASE_DOWN = (OperationalError, InterfaceError)
RETRY_AFTER_S = 5
MESSAGE = "the database is unavailable right now; try again in a few seconds"
_MARK = "_studio_database_down"


def database_down_response(request: HttpRequest) -> HttpResponse:
    """503 in the shape the caller reads: our API's JSON error, MLflow's error body, else a page."""
    response: HttpResponse
    if request.path.startswith(API_ROOT + "/"):
        response = JsonResponse({"error": MESSAGE}, status=503)
    elif request.path.startswith(MLFLOW_ROOT + "/"):
        response = JsonResponse({"error_code": "TEMPORARILY_UNAVAILABLE", "message": MESSAGE}, status=503)
    else:
        # Rendered without the request: context processors would ask the database for the user's teams.
        response = HttpResponse(render_to_string("503.html", {"message": MESSAGE}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        got_request_exception.connect(_mark_if_database_down, dispatch_uid="studio-database-down")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 500 and getattr(request, _MARK, False):
            return database_down_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_DOWN):
            logger.warning("database unavailable while serving %s: %s", request.path, exception)
            return database_down_response(request)
        return None


def _mark_if_database_down(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is not None and isinstance(sys.exc_info()[1], DATABASE_DOWN):
        setattr(request, _MARK, True)
