from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from tests.webapp.polling import poll_until
from tests.webapp.tools.conftest import ToolServer
from webapp.tools import crypto
from webapp.tools.models import TeamTool, ToolStatus, ToolTrial, TrialStatus

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}},
    "required": ["query"],
    "additionalProperties": False,
}
SECRET = "s3cret-Value-that-must-not-leak"


def _client(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def _register(client: Client, team_slug: str, **overrides: Any) -> Any:
    data = {
        "name": "kv_lookup", "description": "Looks things up.", "parameters": json.dumps(SCHEMA), "kind": "http",
        "url": "http://127.0.0.1:9/lookup", "method": "POST", "timeout_s": "5", "secret_header": "X-Tool-Secret",
        "secret": SECRET, "entry_point": "",
    }  # fmt: skip
    data.update(overrides)
    return client.post(reverse("tool_new", args=[team_slug]), data)


def test_an_http_tool_is_registered_with_its_secret_encrypted(personas: dict[str, Any]) -> None:
    acme = personas["acme"]
    response = _register(_client("bob"), acme.slug)
    tool = TeamTool.objects.get(team=acme)
    assert response.status_code == 302 and response["Location"] == reverse("tool", args=[acme.slug, tool.pk])
    assert (tool.name, tool.kind, tool.status, tool.parameters) == (
        "kv_lookup",
        "http",
        ToolStatus.READY,
        SCHEMA,
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM tools_teamtool t")
        (stored_row,) = cursor.fetchone()
    assert SECRET not in stored_row
    assert tool.secret_encrypted in stored_row
    assert crypto.decrypt(tool.secret_encrypted) == SECRET
    assert tool.to_spec().secret == SECRET
    page = _client("bob").get(reverse("tool", args=[acme.slug, tool.pk])).content.decode()
    assert SECRET not in page and "stored encrypted" in page


def test_a_secret_encrypted_under_another_secret_key_is_reported_unreadable(settings: Any) -> None:
    token = crypto.encrypt(SECRET)
    settings.SECRET_KEY = "another key entirely"
    with pytest.raises(crypto.SecretUnreadable, match="enter it again"):
        crypto.decrypt(token)


def test_a_host_outside_the_allowlist_is_refused(personas: dict[str, Any], settings: Any) -> None:
    response = _register(_client("alice"), personas["acme"].slug, url="https://example.com/lookup")
    assert response.status_code == 400
    assert "example.com:443/lookup is not allowed; the outbound targets are: 127.0.0.1:9;" in (
        response.content.decode()
    )
    assert not TeamTool.objects.exists()
    settings.TOOL_ALLOWLIST = ["example.com:443"]
    assert (
        _register(_client("alice"), personas["acme"].slug, url="https://EXAMPLE.com/lookup").status_code
        == 302
    )


def test_a_host_removed_from_the_allowlist_later_is_no_longer_called(
    personas: dict[str, Any], settings: Any
) -> None:
    _register(_client("alice"), personas["acme"].slug)
    settings.TOOL_ALLOWLIST = ["tools.internal:8080"]
    with pytest.raises(PermissionError, match=r"127\.0\.0\.1:9/lookup is not allowed; the outbound targets"):
        TeamTool.objects.get().build()


def test_the_python_kind_is_refused_for_non_staff(personas: dict[str, Any]) -> None:
    response = _register(
        _client("bob"), personas["acme"].slug, kind="python", entry_point="trainer.tools.builtin:EchoTool"
    )
    assert response.status_code == 400
    assert "Only staff can register python tools." in response.content.decode()
    assert not TeamTool.objects.exists()


@pytest.mark.parametrize(
    "parameters, message",
    [
        (
            '{"type": "object", "properties": {"q": {"type": "strnig"}}}',
            "parameters is not a valid JSON Schema",
        ),
        ('{"type": "array"}', "parameters must be a JSON Schema with type &#x27;object&#x27;"),
        ("[1, 2]", "Expected a JSON object"),
        ("{not json", "Enter a valid JSON."),
    ],
)
def test_a_schema_that_is_not_an_object_schema_is_refused(
    personas: dict[str, Any], parameters: str, message: str
) -> None:
    response = _register(_client("alice"), personas["acme"].slug, parameters=parameters)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not TeamTool.objects.exists()


@pytest.mark.parametrize(
    "name, message",
    [("echo", "&#x27;echo&#x27; is a built-in tool"), ("two words", "must be 1-64 characters of letters")],
)
def test_a_name_the_trainer_cannot_use_is_refused(personas: dict[str, Any], name: str, message: str) -> None:
    response = _register(_client("alice"), personas["acme"].slug, name=name)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_a_second_tool_with_the_same_name_in_the_team_is_refused(personas: dict[str, Any]) -> None:
    _register(_client("alice"), personas["acme"].slug)
    response = _register(_client("alice"), personas["acme"].slug)
    assert "This team already has a tool named &#x27;kv_lookup&#x27;." in response.content.decode()
    assert _register(_client("charlie"), personas["other"].slug).status_code == 302  # other teams may


def test_try_it_refuses_arguments_that_fail_the_schema(personas: dict[str, Any]) -> None:
    acme = personas["acme"]
    _register(_client("alice"), acme.slug)
    tool = TeamTool.objects.get()
    response = _client("alice").post(
        reverse("tool_try", args=[acme.slug, tool.pk]), {"arguments": '{"query": 5}'}
    )
    assert response.status_code == 400
    assert "The arguments do not match the schema: query: 5 is not of type &#x27;string&#x27;" in (
        response.content.decode()
    )
    assert not ToolTrial.objects.exists()


def test_the_team_tools_and_builtins_are_offered_to_experiments(personas: dict[str, Any]) -> None:
    from webapp.tools.models import tool_choices

    _register(_client("alice"), personas["acme"].slug)
    names = [name for name, _ in tool_choices(personas["acme"])]
    assert "echo" in names and "kv_lookup" in names
    assert "kv_lookup" not in [name for name, _ in tool_choices(personas["other"])]


def _trial_done(client: Client, team_slug: str, trial: ToolTrial) -> ToolTrial:
    url = reverse("tool_trial", args=[team_slug, trial.pk])
    poll_until(
        lambda: client.get(url, headers={"HX-Request": "true", "HX-Target": "trial"}).status_code == 286
    )
    trial.refresh_from_db()
    return trial


@pytest.mark.django_db(transaction=True)
def test_a_tool_slower_than_its_timeout_ends_in_a_timeout(
    personas: dict[str, Any], start_worker: Any, tool_server: ToolServer
) -> None:
    start_worker()
    acme, client = personas["acme"], _client("alice")
    _register(client, acme.slug, url=f"{tool_server.url}/slow", timeout_s="0.5")
    tool = TeamTool.objects.get()
    client.post(reverse("tool_try", args=[acme.slug, tool.pk]), {"arguments": '{"query": "late"}'})
    trial = _trial_done(client, acme.slug, ToolTrial.objects.get())
    assert trial.status == TrialStatus.DONE
    assert trial.error == "timeout"
    assert "timed out after 0.5 s" in trial.result


@pytest.mark.django_db(transaction=True)
def test_staff_register_a_python_tool_that_a_worker_imports_and_runs(
    personas: dict[str, Any], start_worker: Any
) -> None:
    personas["alice"].is_staff = True
    personas["alice"].save()
    start_worker()
    acme, client = personas["acme"], _client("alice")
    schema = json.dumps({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    _register(client, acme.slug, name="say", kind="python", parameters=schema, entry_point="trainer.tools.builtin:EchoTool")  # fmt: skip
    _register(client, acme.slug, name="ghost", kind="python", parameters=schema, entry_point="no_such.module:Ghost")  # fmt: skip
    poll_until(lambda: not TeamTool.objects.filter(status=ToolStatus.PENDING).exists())
    say, ghost = TeamTool.objects.get(name="say"), TeamTool.objects.get(name="ghost")
    assert say.status == ToolStatus.READY
    assert (ghost.status, ghost.status_message) == (
        ToolStatus.FAILED,
        "cannot import no_such.module:Ghost: ModuleNotFoundError: No module named 'no_such'",
    )
    refused = client.post(reverse("tool_try", args=[acme.slug, ghost.pk]), {"arguments": '{"text": "x"}'})
    assert refused.status_code == 400 and not ToolTrial.objects.exists()
    client.post(reverse("tool_try", args=[acme.slug, say.pk]), {"arguments": '{"text": "<hi & bye>"}'})
    trial = _trial_done(client, acme.slug, ToolTrial.objects.get())
    assert (trial.error, trial.result) == ("", "<hi & bye>")
    page = client.get(reverse("tool", args=[acme.slug, say.pk]), {"trial": trial.pk}).content.decode()
    assert "&lt;hi &amp; bye&gt;" in page and "<hi & bye>" not in page


@pytest.mark.django_db(transaction=True)
def test_a_builtin_tool_can_be_tried_too(personas: dict[str, Any], start_worker: Any) -> None:
    start_worker()
    acme, client = personas["acme"], _client("bob")
    response = client.post(
        reverse("builtin_tool_try", args=[acme.slug, "echo"]), {"arguments": '{"text": "ping"}'}
    )
    trial = ToolTrial.objects.get()
    assert response["Location"] == f"{reverse('builtin_tool', args=[acme.slug, 'echo'])}?trial={trial.pk}"
    trial = _trial_done(client, acme.slug, trial)
    assert (trial.builtin, trial.tool, trial.error, trial.result) == ("echo", None, "", "ping")


def test_a_form_refused_for_another_field_keeps_the_typed_secret(personas: dict[str, Any]) -> None:
    response = _register(_client("bob"), personas["acme"].slug, url="http://evil.example.com/x")
    assert response.status_code == 400 and not TeamTool.objects.exists()
    page = response.content.decode()
    assert "evil.example.com:80/x is not allowed" in page
    assert f'name="secret" value="{SECRET}"' in page
