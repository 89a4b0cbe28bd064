"""Outbound targets that site administrators allow in the product (docs/security.md#outbound): on the
page and over the API, recorded with who and when, counted at once by every check, removable, with
STUDIO_TOOL_ALLOWLIST as the operator's floor."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from tests.webapp.tools.conftest import ToolServer
from trainer.mdp import ToolCallRecord
from trainer.team import run_scope
from trainer.tools import TOOLS, run_tool_call
from webapp.accounts.models import ApiToken
from webapp.tools.models import TeamTool, ToolUnavailable, specs_for_run
from webapp.tools.outbound import OutboundTarget, url_refusal

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


@pytest.fixture
def root(personas: dict[str, Any]) -> Any:
    """The site administrator (a staff user, in no team)."""
    return get_user_model().objects.create_user("root", "root@example.com", PASSWORD, is_staff=True)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _tool_form(url: str, name: str = "greet") -> dict[str, str]:
    return {
        "name": name, "description": "", "parameters": json.dumps(SCHEMA), "kind": "http", "url": url,
        "method": "POST", "timeout_s": "5", "secret_header": "X-Tool-Secret", "secret": "", "entry_point": "",
    }  # fmt: skip


def _api(user: Any) -> dict[str, str]:
    _row, plain = ApiToken.issue(user, "outbound test")
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def _post_json(client: Client, path: str, body: Any, headers: dict[str, str]) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


def _call_as_a_run_would(team: Any, name: str) -> ToolCallRecord:
    """The trainer's tool path: the run's specs, its scoped registry, run_tool_call (the policy checked)."""
    record = ToolCallRecord(name=name, arguments={"query": "loopback"})
    with run_scope(specs_for_run(team, [name], [])):
        asyncio.run(run_tool_call(record, {name: TOOLS.get(name)()}, timeout_s=10))
    return record


def test_an_admin_allows_a_loopback_target_on_the_page_and_a_run_calls_the_tool_there(
    personas: dict[str, Any], root: Any, loopback_endpoint: ToolServer
) -> None:
    acme, target = personas["acme"], loopback_endpoint.url.removeprefix("http://")
    refused = _client(personas["bob"]).post(
        reverse("tool_new", args=[acme.slug]), _tool_form(loopback_endpoint.url)
    )
    assert refused.status_code == 400
    assert (
        f"a site administrator (root) can allow {target} on the Outbound targets page"
        in refused.content.decode()
    )

    answer = _client(root).post(reverse("outbound_targets"), {"rule": target, "note": "the greeter"})
    assert answer.status_code == 302
    allowed = OutboundTarget.objects.get()
    assert (allowed.rule, allowed.note, allowed.allowed_by, allowed.removed_at) == (
        target,
        "the greeter",
        root,
        None,
    )
    page = _client(personas["bob"]).get(reverse("outbound_targets")).content.decode()
    remove = reverse("outbound_target_remove", args=[allowed.pk])
    assert target in page and "root" in page and remove not in page  # members see, never change
    assert remove in _client(root).get(reverse("outbound_targets")).content.decode()

    registered = _client(personas["bob"]).post(
        reverse("tool_new", args=[acme.slug]), _tool_form(loopback_endpoint.url + "/greet")
    )
    assert registered.status_code == 302
    record = _call_as_a_run_would(acme, "greet")
    assert (record.error, record.result) == (None, "hello loopback")
    assert [call["path"] for call in loopback_endpoint.calls] == ["/greet"]


def test_an_admin_allows_and_removes_over_the_api_and_the_removal_counts_at_once(
    personas: dict[str, Any], root: Any, loopback_endpoint: ToolServer
) -> None:
    client, acme, target = Client(), personas["acme"], loopback_endpoint.url.removeprefix("http://")
    created = _post_json(client, "/api/outbound-targets", {"rule": target, "note": "api"}, _api(root))
    assert created.status_code == 201
    assert (created.json()["rule"], created.json()["allowed_by"], created.json()["removed_at"]) == (
        target,
        "root",
        None,
    )
    tool = {"name": "greet", "parameters": SCHEMA, "url": loopback_endpoint.url + "/greet"}
    bob = _api(personas["bob"])
    assert _post_json(client, f"/api/t/{acme.slug}/tools", tool, bob).status_code == 201
    assert _call_as_a_run_would(acme, "greet").error is None
    listed = client.get("/api/outbound-targets", **bob).json()
    assert [item["rule"] for item in listed["items"]] == [target]

    pk = created.json()["id"]
    assert client.delete(f"/api/outbound-targets/{pk}", **_api(root)).status_code == 204
    # No restart: the next check reads the database. Nothing new is registered or run against it.
    again = _post_json(client, f"/api/t/{acme.slug}/tools", {**tool, "name": "greet2"}, bob)
    assert again.status_code == 400 and "a site administrator (root) can allow" in again.json()["error"]
    with pytest.raises(ToolUnavailable, match="'greet' is no longer allowed"):
        specs_for_run(acme, ["greet"], [])
    with pytest.raises(PermissionError, match="is not allowed"):
        TeamTool.objects.get(name="greet").build()
    audit = client.get("/api/outbound-targets?removed=true", **bob).json()["items"]
    assert [(item["rule"], item["allowed_by"], item["removed_by"]) for item in audit] == [
        (target, "root", "root")
    ]
    assert len(loopback_endpoint.calls) == 1


def test_no_one_but_a_site_administrator_allows_a_target(
    personas: dict[str, Any], loopback_endpoint: ToolServer
) -> None:
    acme, target, alice = personas["acme"], loopback_endpoint.url.removeprefix("http://"), personas["alice"]
    assert _client(alice).post(reverse("outbound_targets"), {"rule": target}).status_code == 403
    assert _post_json(Client(), "/api/outbound-targets", {"rule": target}, _api(alice)).status_code == 403
    # The team's owner sending the "allow this" button's field by hand: refused, nothing registered.
    form = {**_tool_form(loopback_endpoint.url), "allow_target": target}
    assert _client(alice).post(reverse("tool_new", args=[acme.slug]), form).status_code == 403
    page = _client(alice).get(reverse("tool_new", args=[acme.slug])).content.decode()
    assert not OutboundTarget.objects.exists() and not TeamTool.objects.exists()
    assert 'name="allow_target"' not in page


def test_the_operators_floor_is_allowed_with_no_target_and_cannot_be_removed_here(
    personas: dict[str, Any], root: Any
) -> None:
    # tests/webapp/tools/conftest.py puts 127.0.0.1:9 in STUDIO_TOOL_ALLOWLIST.
    assert url_refusal("http://127.0.0.1:9/x") is None and not OutboundTarget.objects.exists()
    page = _client(root).get(reverse("outbound_targets")).content.decode()
    assert "127.0.0.1:9" in page and "the operator's floor, always allowed" in page
    assert Client().get("/api/outbound-targets/floor", **_api(root)).json() == {"rules": ["127.0.0.1:9"]}


def test_a_private_address_needs_its_exact_host_and_port(personas: dict[str, Any], root: Any) -> None:
    refused = _client(root).post(reverse("outbound_targets"), {"rule": "10.0.0.0/8:8080"})
    assert refused.status_code == 400 and "a network rule never reaches private" in refused.content.decode()
    assert url_refusal("http://10.1.2.3:8080/") is not None
    assert _client(root).post(reverse("outbound_targets"), {"rule": "10.1.2.3:8080"}).status_code == 302
    assert url_refusal("http://10.1.2.3:8080/") is None
    assert "is not allowed" in (url_refusal("http://10.1.2.4:8080/") or "")


def test_a_target_that_opens_a_service_of_the_product_is_refused(
    personas: dict[str, Any], root: Any, settings: Any
) -> None:
    service = f"127.0.0.1:{settings.PORT}"
    refused = _client(root).post(reverse("outbound_targets"), {"rule": service})
    assert refused.status_code == 400 and "the product&#x27;s own service" in refused.content.decode()
    assert not OutboundTarget.objects.exists()


def test_an_alert_webhook_is_accepted_once_an_admin_allows_its_target(
    personas: dict[str, Any], root: Any
) -> None:
    from webapp.monitoring.checks import all_checks

    url = reverse("health_settings", args=[personas["acme"].slug])
    form = {f"{check.name}-enabled": "on" for check in all_checks()} | {
        "webhook_url": "https://hooks.example.com/x"
    }
    refused = _client(personas["alice"]).post(url, form)
    assert refused.status_code == 400
    assert "a site administrator (root) can allow hooks.example.com:443" in refused.content.decode()
    OutboundTarget.allow("hooks.example.com:443", root, note="alerts")
    assert _client(personas["alice"]).post(url, form).status_code == 302
