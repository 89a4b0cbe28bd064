"""Persona by URL: every URL pattern (Django's resolver), every JSON API operation (the OpenAPI schema)
and every MLflow call, for each persona, with the status and the database state asserted.

A route added without a row in tests/webapp/routes.py fails ``test_every_route_has_a_row``: nothing new
escapes the matrix. Each request runs in a savepoint that is rolled back, so one persona's writes never
change what the next request sees, and a refused request must leave every table exactly as it was.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.routes import (
    API_BODIES,
    API_CALLERS,
    BODY_METHODS,
    DELEGATED_PREFIXES,
    MLFLOW_BODIES,
    PAGES,
    PERSONAS,
    TRACE_BODIES,
    World,
    allowed,
    api_expected,
    api_path,
    auth_headers,
    client_for,
    mlflow_calls,
    mlflow_expected,
    operations,
    page_url,
    patterns,
    refusal,
    rolled_back,
    world,
)
from webapp.mlflow_api.trace_reads import ENDPOINTS as TRACE_ENDPOINTS
from webapp.mlflow_api.views import ENDPOINTS

__all__ = ["world"]  # the fixture
# The world lives in a module-wide transaction; each test runs in a savepoint inside it.
pytestmark = pytest.mark.django_db


def test_every_route_has_a_row() -> None:
    named = {p.name for route, p in patterns() if not route.startswith(DELEGATED_PREFIXES) and p.name}
    unnamed = [route for route, p in patterns() if not route.startswith(DELEGATED_PREFIXES) and not p.name]
    assert unnamed == ["mlflow/^"], "every page needs a name (and a row in PAGES)"
    assert named == set(PAGES), f"add a row to PAGES for {named - set(PAGES)}; drop {set(PAGES) - named}"


@pytest.mark.parametrize("persona", PERSONAS)
def test_every_page_answers_each_persona_and_refusals_change_nothing(world: World, persona: str) -> None:
    signed_in = client_for(world, persona)
    login = reverse("login")
    problems = []
    for name, page in PAGES.items():
        # Logging out ends the session: that request gets a client of its own.
        client = client_for(world, persona) if name == "logout" else signed_in
        get, post = client.get, client.post
        url = page_url(world, name, page)
        headers = {"HTTP_HX_REQUEST": "true"} if page.htmx else {}
        calls = []
        if page.get:
            calls.append(("GET", page.level, lambda url=url, headers=headers, get=get: get(url, **headers)))
        if page.post:
            data = page.data(world)
            calls.append(("POST", page.post, lambda url=url, data=data, post=post: post(url, data)))
        for method, level, send in calls:
            response, changed = rolled_back(send, compare=not allowed(level, persona))
            status = response.status_code
            if allowed(level, persona):
                ok = status < 500 and status not in (401, 403, 404)
                ok = ok or (page.unavailable and status == 503)
                sent_to_login = status == 302 and response["Location"].startswith(login)
                ok = ok and not (persona != "anonymous" and sent_to_login and name != "logout")
                ok = ok or (page.absent and status == 404)
            else:
                ok = status in refusal(level, persona) and not changed
                if status == 302:
                    ok = ok and response["Location"].startswith(login)
            if not ok:
                problems.append(
                    f"{method} {url} as {persona}: {status}{' (database changed)' if changed else ''}"
                    f" {response.get('Location', '')}"
                )
    assert not problems, "\n".join(problems)


def test_no_one_but_staff_reaches_the_admin(world: World) -> None:
    admin_routes = [(route, p) for route, p in patterns() if route.startswith("admin/")]
    # The admin asks one thing, is_staff, which no persona has: the most and the least privileged suffice.
    clients = {persona: client_for(world, persona) for persona in ("anonymous", "owner")}
    problems = []
    for route, pattern in admin_routes:
        name = f"admin:{pattern.name}"
        if pattern.name in ("login", "logout"):
            continue
        kwargs = {key: "1" for key in pattern.pattern.regex.groupindex}
        if "app_label" in kwargs:
            kwargs["app_label"] = "accounts"
        url = reverse(name, kwargs=kwargs) if pattern.name else "/" + route.replace("^", "").replace("$", "")
        for persona, client in clients.items():
            response = client.get(url)
            location = response.get("Location", "")
            if response.status_code != 302 or "/admin/login/" not in location:
                problems.append(f"{url} as {persona}: {response.status_code} {location}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("caller", API_CALLERS)
def test_every_api_operation_answers_each_caller_and_refusals_change_nothing(
    world: World, caller: str
) -> None:
    client = Client()
    found = operations(client)
    with_body = {path for method, path, _, _ in found if method in BODY_METHODS}
    assert with_body == set(API_BODIES), f"give a body for {with_body - set(API_BODIES)}"
    headers = auth_headers(world, caller)
    problems = []
    for method, path, kind, query in found:
        url = api_path(world, path, caller)
        expected = api_expected(kind, method, caller, path)
        if method in BODY_METHODS:
            body = API_BODIES[path](world)
            data = json.dumps(body) if body is not None else ""

            def send(url: str = url, data: str = data, method: str = method) -> Any:
                return client.generic(method, url, data, content_type="application/json", **headers)
        elif method == "DELETE":

            def send(url: str = url) -> Any:
                return client.delete(url, **headers)
        else:

            def send(url: str = url, query: dict[str, str] = query) -> Any:
                return client.get(url, query, **headers)

        response, changed = rolled_back(send, compare=expected is not None)
        status = response.status_code
        shaped = status < 400 or set(response.json()) >= {"error", "code"}
        if expected is None:
            ok = status < 500 and status not in (401, 403, 404) and shaped
        else:
            ok = status in expected and not changed and shaped
        if not ok:
            problems.append(f"{method} {url} as {caller}: {status} {response.content[:200]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("caller", API_CALLERS)
def test_every_mlflow_call_answers_each_caller_and_refusals_change_nothing(world: World, caller: str) -> None:
    assert set(ENDPOINTS) == set(MLFLOW_BODIES) and set(TRACE_ENDPOINTS) == set(TRACE_BODIES)
    client = Client()
    headers = auth_headers(world, caller)
    problems = []
    for version, call, (method, _handler), make_body in mlflow_calls():
        url = f"/mlflow/t/{world.slug}/api/{version}/mlflow/{call}"
        body = make_body(world)
        expected = mlflow_expected(call, method, caller)

        def send(url: str = url, body: dict[str, Any] = body, method: str = method) -> Any:
            if method == "POST":
                return client.post(url, json.dumps(body), content_type="application/json", **headers)
            return client.get(url, body, **headers)

        response, changed = rolled_back(send, compare=expected is not None)
        status = response.status_code
        shaped = status < 400 or {"error_code", "message"} <= set(response.json())
        if expected is None:
            ok = status < 500 and status not in (401, 403, 404)
        else:
            ok = status in expected and not changed
        if not (ok and shaped):
            problems.append(f"{call} as {caller}: {status} {response.content[:200]!r}")
    assert not problems, "\n".join(problems)


def test_a_finished_runs_token_changes_nothing_anywhere(world: World) -> None:
    """The reproduction of the finding: a finished run's token rewrote the comparison table."""
    client, token = Client(), world.run_tokens["finished run"]
    run_id = world.ids["finished"]
    body = gzip.compress(
        json.dumps({"points": [{"key": "reward/mean", "step": 9, "value": 0.98, "ts": 1.0}]}).encode()
    )
    response, changed = rolled_back(lambda: client.post(
        f"/api/ingest/runs/{run_id}/metrics", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING="gzip",
    ))  # fmt: skip
    assert (response.status_code, response.json()["code"], changed) == (401, "unauthenticated", False)


# The artifact service's routes (webapp/mlflow_api/urls.py): each one is called below, so a new one
# must be added here too.
ARTIFACT_ROUTES = {
    "mlflow/api/2.0/mlflow-artifacts/artifacts",
    "mlflow/api/2.0/mlflow-artifacts/artifacts/<path:path>",
    "mlflow/t/<slug:team_slug>/api/2.0/mlflow-artifacts/artifacts",
    "mlflow/t/<slug:team_slug>/api/2.0/mlflow-artifacts/artifacts/<path:path>",
}


def artifact_expected(method: str, caller: str) -> set[int] | None:
    if caller in ("anonymous", "finished run", "child of revoked"):
        return {401}
    if caller in ("outsider", "other run"):
        return {404}
    if caller in ("viewer", "read token") and method == "PUT":
        return {403}
    return None


@pytest.mark.parametrize("caller", API_CALLERS)
def test_every_mlflow_artifact_call_answers_each_caller_and_refusals_write_nothing(
    world: World, caller: str
) -> None:
    from webapp.experiments.artifacts import artifact_root

    assert {route for route, _ in patterns() if "mlflow-artifacts" in route} == ARTIFACT_ROUTES
    run = world.runs["own run"]
    folder = f"{run.experiment_id}/{run.mlflow_run_id}/artifacts"
    name = f"by-{caller.replace(' ', '-')}.txt"
    client, headers, problems = Client(), auth_headers(world, caller), []
    for prefix in ("/mlflow", f"/mlflow/t/{world.slug}"):
        root = f"{prefix}/api/2.0/mlflow-artifacts/artifacts"
        calls = (
            ("PUT", f"{root}/{folder}/{name}", {}),
            ("GET", f"{root}/{folder}/reports/eval.txt", {}),  # the world's artifact
            ("GET", root, {"path": folder}),
        )
        for method, url, query in calls:
            if method == "PUT":
                response = client.put(url, b"hello", content_type="text/plain", **headers)
            else:
                response = client.get(url, query, **headers)
            expected = artifact_expected(method, caller)
            status = response.status_code
            shaped = status < 400 or {"error_code", "message"} <= set(json.loads(response.content))
            ok = status < 500 and status not in (401, 403, 404) if expected is None else status in expected
            if not (ok and shaped):
                problems.append(f"{method} {root} as {caller}: {status} {response.content[:200]!r}")
    written = (artifact_root(run) / name).is_file()
    assert written == (artifact_expected("PUT", caller) is None), "a refused upload must write nothing"
    assert not problems, "\n".join(problems)


# Every MLflow call that writes to a run named in its body, aimed at a run that has ended.
ENDED_RUN_WRITES = ("runs/update", "runs/log-batch", "runs/log-metric", "runs/log-parameter", "runs/set-tag")


@pytest.mark.parametrize("caller", API_CALLERS)
def test_no_caller_writes_into_an_ended_run(world: World, caller: str) -> None:
    """The finding: members could PUT artifacts into, and log metrics to, finished runs. An ended run's
    results are final for every caller (only an administrator's logged action reopens one)."""
    from webapp.experiments.artifacts import artifact_root

    run = world.runs["finished run"]
    ended = {**world.ids, "mlflow_run": run.mlflow_run_id}
    ended_world = World(world.slug, ended, world.users, world.tokens, world.run_tokens, world.parquet)
    client, headers, problems = Client(), auth_headers(world, caller), []
    prefix = f"/mlflow/t/{world.slug}"
    calls: list[tuple[str, Any]] = [
        (call, lambda call=call: client.post(
            f"{prefix}/api/2.0/mlflow/{call}", json.dumps(MLFLOW_BODIES[call](ended_world)),
            content_type="application/json", **headers,
        ))
        for call in ENDED_RUN_WRITES
    ]  # fmt: skip
    calls.append(("traces", lambda: client.post(
        f"{prefix}/api/3.0/mlflow/traces", json.dumps(TRACE_BODIES["traces"](ended_world)),
        content_type="application/json", **headers,
    )))  # fmt: skip
    folder = f"{run.experiment_id}/{run.mlflow_run_id}/artifacts"
    calls.append(("artifact PUT", lambda: client.put(
        f"{prefix}/api/2.0/mlflow-artifacts/artifacts/{folder}/late.txt", b"late", content_type="text/plain",
        **headers,
    )))  # fmt: skip
    for name, send in calls:
        response, changed = rolled_back(send)
        if not 400 <= response.status_code < 500 or changed:
            problems.append(f"{name} as {caller}: {response.status_code} {response.content[:200]!r}")
    assert not artifact_root(run).exists(), "a refused write must leave no file"
    assert not problems, "\n".join(problems)
