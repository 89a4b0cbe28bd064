"""Middleware of the whole site: the JSON API's one error shape, whatever answered, the cache rules of
authenticated answers (docs/security.md#headers), and no NUL in a query string (docs/security.md#limits)."""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.cache import patch_cache_control

from trainer.contract import API_ROOT
from webapp.api import error_body

API_PREFIX = API_ROOT + "/"


def _is_json(response: HttpResponse) -> bool:
    return "json" in response.get("Content-Type", "")


class ApiErrorShapeMiddleware:
    """An error under /api/ that did not come from the API's own handlers (Django's 404 for an
    unknown path, its 400 for a bad Host header, a 500 raised in a middleware) gets the API's error
    shape too, so a client parses every error one way (docs/security.md#errors)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(API_PREFIX) and response.status_code >= 400 and not _is_json(response):
            return _reshaped(request, response)
        return response


def _reshaped(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    status = response.status_code
    reasons = {
        404: f"no API operation at {request.path}: see /api/docs",
        405: f"{request.method} is not allowed on {request.path}",
    }
    try:
        phrase = HTTPStatus(status).phrase.lower()
    except ValueError:
        phrase = "error"
    message = reasons.get(status, phrase)
    shaped = HttpResponse(
        json.dumps(error_body(message, status)), status=status, content_type="application/json"
    )
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if header in response:
            shaped[header] = response[header]
    return shaped


class PrivateCacheMiddleware:
    """Answers to a signed-in user or a bearer token are theirs alone: ``Cache-Control: private``,
    so no shared cache (a proxy, a CDN) keeps a team's page or download for someone else."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if (user is not None and user.is_authenticated) or "Authorization" in request.headers:
            patch_cache_control(response, private=True)
        return response


# MLflow's REST calls answer in MLflow's own error shape, after their own checks.
MLFLOW_API_PREFIXES = ("/mlflow/api/", "/mlflow/t/")


class NoNulInQueryMiddleware:
    """A NUL character in a query parameter, its name or a value, is a 400 naming the parameter,
    before any view runs: Postgres stores no NUL, so any filter holding one would fail in the
    database (a 500). MLflow's calls check their parameters themselves, in MLflow's shape."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(MLFLOW_API_PREFIXES):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    return _nul_refusal(request, name.replace("\x00", ""))
        return self.get_response(request)


def _nul_refusal(request: HttpRequest, name: str) -> HttpResponse:
    message = f"{name}: a query parameter must not contain NUL characters"
    if request.path.startswith(API_PREFIX):
        from webapp.api import error_body

        body = json.dumps(error_body(message, 400, name or None))
        return HttpResponse(body, status=400, content_type="application/json")
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
