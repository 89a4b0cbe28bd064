"""The tool registry in a real browser: register an HTTP tool and try it against a loopback server."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.webapp.tools.conftest import ToolServer
from webapp.tools.models import TeamTool, ToolTrial, TrialStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.slow
def test_alice_registers_an_http_tool_and_tries_it_against_a_loopback_server(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, tool_server: ToolServer
) -> None:
    start_worker()
    page = login("alice")
    page.goto(f"{live_server.url}/t/{personas['acme'].slug}/tools/")
    page.click("text=Register a tool")
    page.fill("input[name=name]", "greet")
    page.fill("textarea[name=description]", "Greets whoever is named.")
    page.check("input[name=kind][value=http]")
    page.fill("input[name=url]", f"{tool_server.url}/greet")
    page.fill("input[name=secret]", "loopback-secret")
    page.click("form.tool-form button[type=submit]")
    page.wait_for_url(re.compile(r"/tools/\d+/$"))
    assert page.locator("h1").inner_text() == "greet"

    page.fill("textarea[name=arguments]", '{"query": "<world>"}')
    page.click("#try button[type=submit]")
    result = page.locator("[data-trial-result]")
    result.wait_for()
    assert result.text_content() == "hello <world>"
    assert page.locator("#trial").get_attribute("data-status") == TrialStatus.DONE
    assert "reward 0.5" in page.locator("#trial").inner_text()

    (call,) = tool_server.calls
    assert call["path"] == "/greet"
    assert call["body"] == {"query": "<world>"}
    assert call["headers"]["X-Tool-Secret"] == "loopback-secret"
    trial = ToolTrial.objects.get()
    assert (trial.tool, trial.result, trial.reward) == (
        TeamTool.objects.get(name="greet"),
        "hello <world>",
        0.5,
    )


def test_arguments_that_fail_the_schema_are_shown_on_the_form_and_nothing_runs(
    personas: dict[str, Any], login: Any, live_server: Any
) -> None:
    page = login("bob")
    page.goto(f"{live_server.url}/t/{personas['acme'].slug}/tools/builtin/echo/")
    page.fill("textarea[name=arguments]", '{"text": 42}')
    page.click("#try button[type=submit]")
    error = page.locator("#try .errorlist")
    error.wait_for()
    assert error.inner_text() == "The arguments do not match the schema: text: 42 is not of type 'string'"
    assert not ToolTrial.objects.exists()
