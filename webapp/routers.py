"""The JSON API as served: every app's router mounted on the one API (webapp.api.api), and the
handlers that give each error the API's one shape (docs/security.md#errors). The apps' routers
import the kit in webapp.api; only this module imports the routers (docs/architecture.md#layers)."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError

from webapp.accounts.api import router as members_router
from webapp.accounts.api import tokens_router
from webapp.accounts.throttle import TokenLockedOut, retry_after_s
from webapp.api import api, error_body
from webapp.datasets.api import team_router as datasets_team_router
from webapp.experiments.api import router as experiments_router
from webapp.experiments.evaluations_api import router as evaluations_router
from webapp.experiments.fork_api import router as fork_router
from webapp.experiments.models import Run
from webapp.experiments.sdk_api import router as sdk_router
from webapp.experiments.sweep_api import router as sweeps_router
from webapp.experiments.trainer_api import datasets_router
from webapp.experiments.trainer_api import router as lifecycle_router
from webapp.ingestion.api import router as ingest_router
from webapp.monitoring.api import router as health_router
from webapp.outage import database_down_response
from webapp.playground.api import router as playground_router
from webapp.results.api import router as results_router
from webapp.results.checkpoints_api import router as checkpoints_router
from webapp.results.compare_api import router as compare_router
from webapp.results.export_api import router as exports_router
from webapp.results.resume_api import router as resume_router
from webapp.results.storage_api import router as storage_router
from webapp.rollouts.api import router as rollouts_router
from webapp.rollouts.review_api import router as review_router
from webapp.tools.api import rewards_router
from webapp.tools.api import router as tools_router
from webapp.tools.outbound_api import router as outbound_router

logger = logging.getLogger(__name__)

# The trainer's routers carry whole paths (route(...)): they mount at the root.
api.add_router("", lifecycle_router)
api.add_router("", datasets_router)
api.add_router("", ingest_router)
api.add_router("/t", experiments_router)
api.add_router("/t", sweeps_router)
api.add_router("/t", compare_router)
api.add_router("/t", results_router)
api.add_router("/t", rollouts_router)
api.add_router("/t", review_router)
api.add_router("/t", health_router)
api.add_router("/t", datasets_team_router)
api.add_router("/t", tools_router)
api.add_router("/t", evaluations_router)
api.add_router("/t", checkpoints_router)
api.add_router("/t", fork_router)
api.add_router("/t", resume_router)
api.add_router("/t", storage_router)
api.add_router("/t", rewards_router)
api.add_router("/t", members_router)
api.add_router("", tokens_router)
api.add_router("", outbound_router)
api.add_router("/t", playground_router)
api.add_router("/t", exports_router)
api.add_router("/t", sdk_router)


def _error(request: HttpRequest, message: str, status: int, field: str | None = None) -> HttpResponse:
    run = getattr(request, "auth", None)
    if isinstance(run, Run) and status in (400, 413, 422):
        # A trainer's report its own run refused: the trainer drops it, the run page counts it.
        run.note_refused(f"{request.path}: {message}")
    return api.create_response(request, error_body(message, status, field), status=status)


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_down(request: HttpRequest, exc: Exception) -> HttpResponse:
    return database_down_response(request)  # 503: the trainer's reporter keeps the batch and retries


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return _error(request, "not found", 404)


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: Exception) -> HttpResponse:
    return _error(request, str(exc) or "forbidden", 403)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = _error(request, "a valid Bearer token is required", 401)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return _error(request, exc.message, exc.status_code, field=getattr(exc, "field", None))


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    # ninja's location starts with where the value came from (body, query, path): not a field.
    parts = [str(part) for part in first.get("loc", ())]
    source, path = (parts[0], parts[1:]) if parts and parts[0] in ("body", "query", "path") else ("", parts)
    if source == "body":
        path = path[1:]  # the name of the view's body parameter, which the client never sees
    where = ".".join(path) or source or "body"
    return _error(request, f"{where}: {first.get('msg', 'invalid')}", 400, field=".".join(path) or None)


@api.exception_handler(TokenLockedOut)
def _locked_out(request: HttpRequest, exc: Exception) -> HttpResponse:
    response = _error(request, str(exc), 429)
    response["Retry-After"] = str(retry_after_s())
    return response


@api.exception_handler(Exception)
def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("%s %s failed", request.method, request.path)
    return _error(request, f"the server failed on this request ({type(exc).__name__}); it is logged", 500)
