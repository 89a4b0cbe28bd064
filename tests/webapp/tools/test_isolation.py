"""Every page and action of the tool registry answers 404 to charlie, who is not in Acme."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from webapp.tools.models import TeamTool, ToolKind, ToolTrial

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


@pytest.fixture
def acme_objects(personas: dict[str, Any]) -> dict[str, Any]:
    acme = personas["acme"]
    tool = TeamTool.register(
        acme,
        personas["alice"],
        name="lookup",
        parameters=SCHEMA,
        kind=ToolKind.HTTP,
        url="http://127.0.0.1:9/",
    )
    trial = ToolTrial.objects.create(team=acme, tool=tool, arguments={"text": "x"})
    return {"acme": acme, "other": personas["other"], "tool": tool, "trial": trial}


def _charlie() -> Client:
    client = Client()
    assert client.login(username="charlie", password=PASSWORD)
    return client


def test_charlie_gets_404_on_every_tool_page(acme_objects: dict[str, Any]) -> None:
    slug, tool, trial = acme_objects["acme"].slug, acme_objects["tool"], acme_objects["trial"]
    pages = [
        reverse("tools", args=[slug]),
        reverse("tool_new", args=[slug]),
        reverse("tool", args=[slug, tool.pk]),
        reverse("builtin_tool", args=[slug, "echo"]),
        reverse("tool_trial", args=[slug, trial.pk]),
    ]
    client = _charlie()
    assert [client.get(url).status_code for url in pages] == [404] * len(pages)
    # Nor does his own team's URL reach Acme's objects.
    own = acme_objects["other"].slug
    assert client.get(reverse("tool", args=[own, tool.pk])).status_code == 404
    assert client.get(reverse("tool_trial", args=[own, trial.pk])).status_code == 404


def test_charlie_gets_404_on_every_tool_action_and_nothing_changes(acme_objects: dict[str, Any]) -> None:
    slug, tool = acme_objects["acme"].slug, acme_objects["tool"]
    arguments = {"arguments": json.dumps({"text": "x"})}
    actions = [
        (
            reverse("tool_new", args=[slug]),
            {"name": "mine", "parameters": json.dumps(SCHEMA), "kind": "http"},
        ),
        (reverse("tool_try", args=[slug, tool.pk]), arguments),
        (reverse("builtin_tool_try", args=[slug, "echo"]), arguments),
        (reverse("tool_delete", args=[slug, tool.pk]), {}),
    ]
    client = _charlie()
    assert [client.post(url, data).status_code for url, data in actions] == [404] * len(actions)
    assert list(TeamTool.objects.values_list("name", flat=True)) == ["lookup"]
    assert ToolTrial.objects.count() == 1
