"""The JSON API: one django-ninja instance, with the routers each app keeps beside its models.

- the trainer's calls (``trainer.contract``: its run's life under ``/api/runs/<id>/``, what it
  produces under ``/api/ingest/runs/<id>/``), with its per-run token; each route is mounted from
  the contract's path by :func:`route`;
- ``/api/t/{team}/...``: people and scripts, with a personal API token (Bearer ``sk_...``).
- ``/api/openapi.json`` is the OpenAPI 3 schema, generated from the pydantic models;
  ``/api/docs`` shows it (Swagger UI, served from the django-ninja package, no CDN).

Every error, 4xx and 5xx, on every path under ``/api/`` has one shape (docs/security.md#errors):
``{"error": "<what went wrong>", "code": "<kind>", "field": "<dotted path>"}`` (``field`` when one
field is to blame): 400 a bad body, 401 no or a bad token (a run's token dies with its run), 403 a
role too low, 404 anything outside the caller's teams (outsiders do not learn it exists), 409 a
state that forbids it, 413 a body too large, 429 too many failed token attempts, 500 our bug.
A 4xx is deterministic: sending the same request again gets the same answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer
from pydantic import BaseModel, ConfigDict, model_validator

from trainer.contract import API_ROOT, CLAIMANT_HEADER, INT4_MAX
from webapp.accounts.models import ApiToken, Scope
from webapp.accounts.throttle import (
    TokenLockedOut,
    check_token_allowed,
    retry_after_s,
    token_failed,
    token_is_known,
)
from webapp.experiments.models import Run
from webapp.outage import database_down_response

logger = logging.getLogger(__name__)

_PATH_PARAMETER = re.compile(r"\{(\w+)\}")
# The kind of each error status, the ``code`` of the error body.
ERROR_CODES = {
    400: "invalid", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    409: "conflict", 413: "too_large", 415: "unsupported_media_type", 422: "invalid", 429: "throttled",
    500: "server_error", 503: "unavailable",
}  # fmt: skip


def error_body(message: str, status: int, field: str | None = None, **extra: Any) -> dict[str, Any]:
    """The one error shape of the JSON API (docs/security.md#errors)."""
    body: dict[str, Any] = {"error": message, "code": ERROR_CODES.get(status, "error")}
    if field:
        body["field"] = field
    body.update(extra)
    return body


def route(contract_path: str) -> str:
    """A path of ``trainer.contract`` as a route of this API: relative to API_ROOT (where urls.py
    mounts it), with ``{x_id}`` parameters typed as integers."""
    if not contract_path.startswith(API_ROOT + "/"):
        raise ValueError(f"{contract_path} is not under the API root {API_ROOT}")
    relative = contract_path.removeprefix(API_ROOT)
    return _PATH_PARAMETER.sub(lambda m: f"{{int:{m[1]}}}" if m[1].endswith("_id") else m[0], relative)


class RunTokenAuth(HttpBearer):
    """The per-run token a trainer process gets at launch; ``request.auth`` is its Run (while it lives)."""

    def authenticate(self, request: HttpRequest, token: str) -> Run | None:
        check_token_allowed(request)
        run = Run.for_token(token)
        if run is None and not token_is_known(token):
            token_failed(request)
        return run


def get_run_for_token(request: HttpRequest, run_id: int) -> Run:
    """The run a trainer's request names, which must be its token's own: any other run is a 404."""
    run: Run = request.auth  # type: ignore[attr-defined]
    if run.pk != run_id:
        raise Http404("no such run")
    return run


def get_run_for_claimant(request: HttpRequest, run_id: int) -> Run:
    """:func:`get_run_for_token` for a call that changes the run: only the process that claimed it
    may (its claimant id in the CLAIMANT_HEADER); any other is a 409 and changes nothing."""
    run = get_run_for_token(request, run_id)
    if not run.is_claimant(request.headers.get(CLAIMANT_HEADER, "")):
        who = "no process has claimed it yet" if not run.claimant else "another process claimed it"
        raise HttpError(409, f"this process may not change run {run.pk}: {who}")
    return run


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class UserTokenAuth(HttpBearer):
    """A personal API token; sets ``request.user`` so the apps' access helpers apply unchanged. A
    token without the write scope may only read (403 on anything else), and an expired one is dead
    (docs/api.md#tokens)."""

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        check_token_allowed(request)
        found = ApiToken.find(token)
        if found is None:
            if not token_is_known(token):
                token_failed(request)
            return None
        request.user = found.user
        request.api_token = found  # type: ignore[attr-defined]
        if request.method not in SAFE_METHODS and not found.allows(Scope.WRITE):
            raise PermissionDenied(f"the token {found.name!r} may only read (it lacks the write scope)")
        return found.user


class FieldError(HttpError):
    """A 4xx about fields of the request: the error body names the first (``field``)."""

    def __init__(self, problems: Sequence[tuple[str, str]], *, prefix: str = "", status: int = 400) -> None:
        super().__init__(status, "; ".join(f"{prefix}{path}: {text}" for path, text in problems))
        self.field = prefix + problems[0][0] if problems else None


def form_error(form: Any, *, prefix: str = "", status: int = 400) -> FieldError:
    """A bound Django form's errors as the API's FieldError: one validation for pages and API."""
    problems = [
        (prefix + name if name != "__all__" else "body", str(message))
        for name, messages in form.errors.items()
        for message in messages
    ]
    return FieldError(problems or [("body", "invalid")], status=status)


def nul_at(value: Any, path: str = "") -> str | None:
    """The dotted path of the first text holding a NUL character (Postgres stores none), else None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return f"{path}.{key}".strip(".")
        found = nul_at(item, f"{path}.{key}".strip("."))
        if found is not None:
            return found
    return None


class StrictSchema(Schema):
    """A request body a person or a script sends: a field nobody reads is a mistake, so it is refused
    rather than ignored, and so is text Postgres cannot store (NUL)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: Any) -> Any:
        where = nul_at(data)
        if where is not None:
            raise ValueError(f"{where or 'body'} must not contain NUL characters")
        return data


class StudioAPI(NinjaAPI):
    # Wire models whose bodies a view parses itself (for speed) still belong in the schema.
    extra_schemas: list[type[BaseModel]] = []

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(*args, **kwargs)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in self.extra_schemas:
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
        return schema


api = StudioAPI(
    title="Agent-R1 Studio API",
    version="1",
    description=__doc__ or "",
    urls_namespace="api",
)


MAX_PAGE_SIZE = 500
MAX_PAGE = INT4_MAX // MAX_PAGE_SIZE  # so that the offset of any page fits the database's integers


class PageParams(Schema):
    page: int = Field(1, ge=1, le=MAX_PAGE, description="Page number, from 1.")
    page_size: int = Field(
        50, ge=1, le=MAX_PAGE_SIZE, description=f"Items per page (at most {MAX_PAGE_SIZE})."
    )


T = TypeVar("T")


class Page(Schema, Generic[T]):
    """One page of a list; ``Page[RunOut]`` is its schema for runs (OpenAPI names it ``Page_RunOut_``)."""

    items: list[T]
    count: int = Field(description="Items on all pages.")
    page: int
    page_size: int


def paginate(items: QuerySet[Any], params: PageParams) -> dict[str, Any]:
    """One page of a queryset, as ``{"items", "count", "page", "page_size"}`` (server-side)."""
    start = (params.page - 1) * params.page_size
    return {
        "items": list(items[start : start + params.page_size]),
        "count": items.count(),
        "page": params.page,
        "page_size": params.page_size,
    }


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


def _register_routers() -> None:
    from webapp.accounts.api import router as members_router
    from webapp.accounts.api import tokens_router
    from webapp.datasets.api import router as datasets_router
    from webapp.datasets.api import team_router as datasets_team_router
    from webapp.experiments.api import router as experiments_router
    from webapp.experiments.evaluations_api import router as evaluations_router
    from webapp.experiments.sweep_api import router as sweeps_router
    from webapp.experiments.trainer_api import router as lifecycle_router
    from webapp.ingestion.api import router as ingest_router
    from webapp.results.api import router as results_router
    from webapp.results.checkpoints_api import router as checkpoints_router
    from webapp.results.storage_api import router as storage_router
    from webapp.rollouts.api import router as rollouts_router
    from webapp.tools.api import rewards_router
    from webapp.tools.api import router as tools_router

    # The trainer's routers carry whole paths (route(...)): they mount at the root.
    api.add_router("", lifecycle_router)
    api.add_router("", datasets_router)
    api.add_router("", ingest_router)
    api.add_router("/t", experiments_router)
    api.add_router("/t", sweeps_router)
    api.add_router("/t", results_router)
    api.add_router("/t", rollouts_router)
    api.add_router("/t", datasets_team_router)
    api.add_router("/t", tools_router)
    api.add_router("/t", evaluations_router)
    api.add_router("/t", checkpoints_router)
    api.add_router("/t", storage_router)
    api.add_router("/t", rewards_router)
    api.add_router("/t", members_router)
    api.add_router("", tokens_router)


_register_routers()
