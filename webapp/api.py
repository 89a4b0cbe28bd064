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

import re
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from django.db.models import QuerySet
from ninja import Field, NinjaAPI, Schema
from ninja.errors import HttpError
from pydantic import BaseModel, ConfigDict, model_validator

from trainer.contract import API_ROOT, INT4_MAX

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


def multipart_body(required: list[str], properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a file upload route (django-ninja's ``openapi_extra``): a
    multipart form with these fields."""
    schema = {"type": "object", "required": required, "properties": properties}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


def text_field(description: str, max_length: int = 200) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "description": description}


def file_field(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "binary", "description": description}


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


def newest_first(items: QuerySet[Any], params: PageParams) -> dict[str, Any]:
    """One page of ``items``, the newest first (what every list of a team's records shows)."""
    return paginate(items.order_by("-created", "-id"), params)


def paginate(items: QuerySet[Any], params: PageParams) -> dict[str, Any]:
    """One page of a queryset, as ``{"items", "count", "page", "page_size"}`` (server-side)."""
    start = (params.page - 1) * params.page_size
    return {
        "items": list(items[start : start + params.page_size]),
        "count": items.count(),
        "page": params.page,
        "page_size": params.page_size,
    }
