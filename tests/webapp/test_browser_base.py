from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.browser


def test_alice_logs_in_and_sees_her_teams_dashboard(personas: Any, login: Any, live_server: Any) -> None:
    page = login("alice")
    assert page.url == f"{live_server.url}/t/{personas['acme'].slug}/"
    assert page.locator("h1").inner_text() == "Acme dashboard"
    nav = page.locator("nav.mainnav a").all_inner_texts()
    assert nav == [
        "Dashboard",
        "Datasets",
        "Tools",
        "Experiments",
        "Runs",
        "Checkpoints",
        "Curves",
        "Compare",
        "Review",
        "Playground",
    ]
    # htmx is served from static/ and loaded; CSRF travels in hx-headers.
    assert page.evaluate("typeof window.htmx") == "object"
    assert "X-CSRFToken" in (page.locator("body").get_attribute("hx-headers") or "")


def test_charlie_gets_a_404_on_alices_dashboard(personas: Any, login: Any, live_server: Any) -> None:
    page = login("charlie")
    response = page.goto(f"{live_server.url}/t/{personas['acme'].slug}/")
    assert response.status == 404


def test_the_team_switcher_moves_between_teams(personas: Any, login: Any, live_server: Any) -> None:
    personas["other"].add_member(personas["alice"], "viewer")
    page = login("alice")
    page.select_option("#team-switcher", personas["other"].slug)
    page.wait_for_url(f"{live_server.url}/t/{personas['other'].slug}/")
    assert page.locator("h1").inner_text() == "Other dashboard"


def test_the_pages_own_scripts_and_styles_pass_the_content_security_policy(
    personas: Any, browser: Any, live_server: Any
) -> None:
    from tests.conftest import PASSWORD

    context = browser.new_context()  # the policy enforced, unlike the shared page fixture's
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None)  # fmt: skip
    slug = personas["acme"].slug
    for path in (
        "",
        "datasets/",
        "tools/",
        "experiments/",
        "experiments/new/",
        "curves/",
        "compare/",
        "checkpoints/",
    ):
        response = page.goto(f"{live_server.url}/t/{slug}/{path}")
        assert response.status == 200 and "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
    assert page.evaluate("typeof window.htmx") == "object"
    context.close()
    assert refused == []
