"""The "allow this" button in a real browser: a member is told who can allow a tool's target; a site
administrator allows it and registers the tool in one click (screenshots under var/shots/b35allow/)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from tests.conftest import PASSWORD
from tests.webapp.tools.conftest import ToolServer
from webapp.accounts.models import Role
from webapp.tools.models import TeamTool
from webapp.tools.outbound import OutboundTarget

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "b35allow"
WIDTHS = (1440, 1024)


def _shoot(page: Any, name: str) -> None:
    """The page at each width, whole; and nothing may run past the right edge."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        sideways = page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert sideways <= 0, (name, width, sideways)


def _register(page: Any, base: str, url: str) -> None:
    page.goto(f"{base}/t/acme/tools/new/")
    page.fill("input[name=name]", "greet")
    page.check("input[name=kind][value=http]")
    page.fill("input[name=url]", url)
    page.click("form.tool-form button[type=submit]:not([name])")


def test_an_admin_allows_a_tools_target_from_the_refusal_and_the_tool_is_registered(
    personas: dict[str, Any], login: Any, live_server: Any, loopback_endpoint: ToolServer
) -> None:
    root = get_user_model().objects.create_user("root", "root@example.com", PASSWORD, is_staff=True)
    personas["acme"].add_member(root, Role.MEMBER)
    target, url = loopback_endpoint.url.removeprefix("http://"), loopback_endpoint.url + "/greet"

    page = login("bob")
    _register(page, live_server.url, url)
    error = page.locator(".field-url .errorlist, .errorlist").first
    assert f"a site administrator (root) can allow {target}" in error.inner_text()
    assert page.locator("button[name=allow_target]").count() == 0
    _shoot(page, "refused-member")

    page.click("button:has-text('Log out bob')")
    page.wait_for_url(re.compile(r"/accounts/login/|/$"))
    page = login("root")
    _register(page, live_server.url, url)
    button = page.locator("button[name=allow_target]")
    assert button.inner_text() == f"Allow {target} and register"
    _shoot(page, "refused-admin")
    button.click()
    page.wait_for_url(re.compile(r"/tools/\d+/$"))
    assert page.locator("h1").inner_text() == "greet"
    allowed = OutboundTarget.objects.get()
    assert (allowed.rule, allowed.allowed_by, TeamTool.objects.get().url) == (target, root, url)

    page.goto(f"{live_server.url}/outbound/")
    row = page.locator(f"#outbound-live tr[data-target='{target}']")
    assert "root" in row.inner_text() and "for a tool of the team Acme" in row.inner_text()
    _shoot(page, "outbound-targets")
