"""Hostile input to every POST operation — the JSON API (from its OpenAPI schema), the MLflow endpoint
and the site's forms — by a caller allowed to make it: NUL characters, over-long strings, 2⁶³
integers, NaN and infinities, duplicate keys, deep nesting and unknown fields. None may answer 5xx
(docs/security.md#limits): a 500 makes a client retry for ever, which is a hang, not an error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.webapp.routes import (
    API_BODIES,
    BODY_METHODS,
    PAGES,
    World,
    api_path,
    auth_headers,
    client_for,
    mlflow_calls,
    operations,
    page_url,
    rolled_back,
    world,
)

__all__ = ["world"]  # the fixture
# The world lives in a module-wide transaction; each test runs in a savepoint inside it.
pytestmark = pytest.mark.django_db

LONG = "x" * 100_000
# Raw JSON text for what json.dumps cannot write as a Python value: literals and 10,000 levels.
NAN = "NaN"
DEEP = "[" * 10_000 + "]" * 10_000
# 2**63 overflows every integer column; NaN stands for the non-finite numbers (one parse path).
SCALARS: tuple[Any, ...] = ("a\x00b", LONG, 2**63, "", None, True, [], {})


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)  # type: ignore[index]
    return copy


MARK = "__HOSTILE__"


def hostile_bodies(body: Any) -> Iterator[str]:
    """JSON texts: each leaf replaced by each hostile value, then the whole body's own mischief."""
    if body is None:
        body = {}
    for path in _leaves(body):
        if not path:
            continue
        for value in SCALARS:
            yield json.dumps(_replace(body, path, value))
        for raw in (NAN, DEEP):
            yield json.dumps(_replace(body, path, MARK)).replace(f'"{MARK}"', raw)
    if isinstance(body, dict):
        text = json.dumps(body)
        first = next(iter(body), None)
        if first is not None:
            yield f'{{"{first}": {2**63}, {text[1:]}'  # a duplicate key, its first copy hostile
        yield json.dumps({**body, "unexpected_field": 1})
    yield DEEP
    yield "[]"
    yield '"just a string"'
    yield "{not json"
    yield "\x00"


def _problems(
    client: Client, url: str, bodies: Iterator[str], headers: dict[str, str], method: str = "POST"
) -> list[str]:
    found = []
    for text in bodies:
        data = text.encode("utf-8", "surrogatepass")
        response, _ = rolled_back(
            lambda data=data: client.generic(method, url, data, content_type="application/json", **headers),
            compare=False,
        )
        if response.status_code >= 500:
            found.append(f"{method} {url} {text[:120]!r}: {response.status_code} {response.content[:200]!r}")
    return found


@pytest.mark.slow
def test_no_json_api_post_answers_5xx_to_hostile_bodies(world: World) -> None:
    client = Client()
    problems = []
    for method, path, kind, _query in operations(client):
        if method not in BODY_METHODS:
            continue
        headers = auth_headers(world, "own run" if kind == "RunTokenAuth" else "owner")
        bodies = hostile_bodies(API_BODIES[path](world))
        problems += _problems(client, api_path(world, path), bodies, headers, method)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_no_mlflow_call_answers_5xx_to_hostile_bodies(world: World) -> None:
    client = Client()
    problems = []
    for caller in ("owner", "own run"):
        headers = auth_headers(world, caller)
        for version, call, (method, _handler), make_body in mlflow_calls():
            url = f"/mlflow/t/{world.slug}/api/{version}/mlflow/{call}"
            body = make_body(world)
            if method == "POST":
                problems += _problems(client, url, hostile_bodies(body), headers)
                continue
            for path in _leaves(body):
                for value in ("a\x00b", LONG, str(2**63), "-1", "NaN"):
                    query = _replace(body, path, value)
                    response, _ = rolled_back(
                        lambda url=url, query=query, headers=headers: client.get(url, query, **headers),
                        compare=False,
                    )
                    if response.status_code >= 500:
                        problems.append(f"GET {url} {path}={value[:20]!r}: {response.status_code}")
    assert not problems, "\n".join(problems)


def test_no_form_post_answers_5xx_to_hostile_fields(world: World) -> None:
    client = client_for(world, "owner")
    problems = []
    for name, page in PAGES.items():
        if page.post is None:
            continue
        url = page_url(world, name, page)
        fields = page.data(world) or {"name": ""}
        for field in fields:
            for value in ("a\x00b", LONG, str(2**63), "NaN", '{"a": NaN}', DEEP, '{"a": 1, "a": 2}'):
                response, _ = rolled_back(
                    lambda url=url, data={**fields, field: value}: client.post(url, data), compare=False
                )
                if response.status_code >= 500:
                    problems.append(f"POST {url} {field}={value[:20]!r}: {response.status_code}")
    assert not problems, "\n".join(problems)
