"""Hostile input to every POST operation — the JSON API (from its OpenAPI schema), the MLflow endpoint
and the site's forms — by a caller allowed to make it: NUL characters, over-long strings, 2⁶³
integers, NaN and infinities, duplicate keys, deep nesting and unknown fields; the same values in
every query parameter of every API operation (the schema's) and every filter parameter of every page
(what the views read from the query string), a small fuzzer; and the inputs that were 500s once
(artifact names, uploads under a file, imports of too many files). None may answer 5xx
(docs/security.md#limits): a 500 makes a client retry for ever, which is a hang, not an error."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

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
from trainer.contract import API_ROOT

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


# -- the fuzzer: hostile values in every query parameter -----------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# A few values per parameter (the suite's time budget): what made 500s before, one of each kind.
QUERY_VALUES = ("a\x00b", "x" * 5000, str(2**63), str(-(2**63) - 1), "NaN", "-Infinity", "1e309", "")
# What a view reads from the query string: request.GET.get("x"), .getlist("x"), and params.get("x")
# in the helpers the views hand request.GET to (the runs table), found in the code itself.
_READ_FROM_QUERY = re.compile(r"""(?:request\.GET|params)\.(?:get|getlist)\(\s*["'](\w+)["']""")


def page_filter_parameters() -> set[str]:
    """Every query parameter a page reads: the views' own reads and the fields of the forms they
    bind to the query string."""
    from webapp.rollouts.forms import PromptCompareForm, RolloutFilterForm, SearchForm

    found = {
        name
        for path in (ROOT / "webapp").rglob("*.py")
        for name in _READ_FROM_QUERY.findall(path.read_text())
    }
    for form in (RolloutFilterForm, SearchForm, PromptCompareForm):
        found |= set(form.base_fields)
    return found


def _query_problems(
    client: Client,
    url: str,
    query: dict[str, Any],
    headers: dict[str, str],
    method: str,
    *,
    may_503: bool = False,
) -> str:
    def send() -> Any:
        if method == "GET":
            return client.get(url, query, **headers)
        return client.generic(method, f"{url}?{urlencode(query, doseq=True)}", "", **headers)

    response, _ = rolled_back(send, compare=False)
    if response.status_code < 500 or (may_503 and response.status_code == 503):
        return ""
    return f"{method} {url} {str(query)[:160]}: {response.status_code} {response.content[:200]!r}"


@pytest.mark.slow
def test_no_api_operation_answers_5xx_to_hostile_query_parameters(world: World) -> None:
    client = Client()
    schema = client.get(f"{API_ROOT}/openapi.json").json()
    problems = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            kind = next(iter(operation["security"][0]))
            headers = auth_headers(world, "own run" if kind == "RunTokenAuth" else "owner")
            names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            required = {name: "1" for name in names if name in ("key", "keys", "run")}
            for name in names:
                for value in QUERY_VALUES:
                    query = {**required, name: value}
                    problems.append(
                        _query_problems(client, api_path(world, path), query, headers, method.upper())
                    )
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


# The runs table reads its filters as (column, operator, value) triples: each hostile value goes
# into a filter of each kind of column, so that it reaches the value's parser.
RUNS_TABLE_FILTERS = (
    ("config:algorithm.kl_coef", "eq"), ("config:algorithm.kl_coef", "gt"), ("config:x", "contains"),
    ("name", "contains"), ("param:lr", "eq"), ("seed", "gt"), ("duration", "gt"), ("started", "lt"),
    ("tags", "contains"), ("status", "eq"), ("kind", "ne"), ("last:reward/mean", "ge"),
)  # fmt: skip


def _runs_table_queries() -> Iterator[dict[str, str]]:
    for column, op in RUNS_TABLE_FILTERS:
        yield from ({"sort": f"-{column}"}, {"group": column})
        # (NUL never reaches the table: NoNulInQueryMiddleware answers first, as for every page.)
        yield from ({"fc": column, "fo": op, "fv": value} for value in QUERY_VALUES if "\x00" not in value)


@pytest.mark.slow
def test_no_page_answers_5xx_to_hostile_filter_parameters(world: World) -> None:
    client = client_for(world, "owner")
    names = page_filter_parameters()
    assert {"sort", "fc", "fo", "fv", "group", "page", "q", "run", "key"} <= names
    problems = []
    for name, page in PAGES.items():
        if not page.get or name == "logout":
            continue
        url = page_url(world, name, page).split("?")[0]
        for value in QUERY_VALUES:
            every = dict.fromkeys(names, value)
            problems.append(_query_problems(client, url, every, {}, "GET", may_503=page.unavailable))
        if name in ("runs", "experiment"):
            problems += [_query_problems(client, url, query, {}, "GET") for query in _runs_table_queries()]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


# -- the inputs that were 500s ----------------------------------------------------------------------


def test_artifact_names_too_long_or_under_a_file_are_400s_and_write_nothing(world: World) -> None:
    """The findings: an artifact name of 300 characters, and an upload under an existing file."""
    from webapp.experiments.artifacts import artifact_root

    run = world.runs["own run"]
    folder = f"{run.experiment_id}/{run.mlflow_run_id}/artifacts"
    root = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{folder}"
    client, headers = Client(), auth_headers(world, "owner")
    before = sorted(artifact_root(run).rglob("*"))
    calls = {
        "PUT a 300-character name": lambda: client.put(f"{root}/{'n' * 300}.txt", b"x", **headers),
        "PUT under a file": lambda: client.put(f"{root}/reports/eval.txt/inside.txt", b"x", **headers),
        "PUT deeper under a file": lambda: client.put(f"{root}/reports/eval.txt/a/b.txt", b"x", **headers),
        "GET a 300-character name": lambda: client.get(f"{root}/{'n' * 300}.txt", **headers),
        "list a 300-character folder": lambda: client.get(
            "/mlflow/api/2.0/mlflow-artifacts/artifacts", {"path": f"{folder}/{'n' * 300}"}, **headers
        ),
    }
    for name, send in calls.items():
        response, _ = rolled_back(send, compare=False)
        assert response.status_code == 400, (name, response.content)
        assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE", name
    page = client_for(world, "owner").get(f"/t/{world.slug}/runs/{run.pk}/artifacts/{'n' * 300}.txt")
    assert page.status_code == 404
    assert sorted(artifact_root(run).rglob("*")) == before


def test_an_import_of_more_files_than_a_request_may_carry_is_a_400_naming_the_dumps(world: World) -> None:
    """The finding: an import with more than 100 files (Django's DATA_UPLOAD_MAX_NUMBER_FILES) was a 500."""
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile

    many = settings.DATA_UPLOAD_MAX_NUMBER_FILES + 1
    line = b'{"input": "q", "output": "a", "score": 1.0}\n'

    def dumps() -> list[SimpleUploadedFile]:
        return [SimpleUploadedFile(f"{step}.jsonl", line) for step in range(many)]

    api = Client().post(f"/api/t/{world.slug}/imports", {"dump": dumps()}, **auth_headers(world, "owner"))
    assert api.status_code == 400, api.content
    assert api.json()["field"] == "dump" and f"at most {many - 1} files" in api.json()["error"]
    page = client_for(world, "owner").post(f"/t/{world.slug}/runs/import/", {"dump": dumps()})
    assert page.status_code == 400 and f"at most {many - 1} files" in page.content.decode()
