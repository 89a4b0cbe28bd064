"""Real Chromium on roles and first start: a viewer sees no write buttons and a refused action
explains itself; an owner changes a role and removes a member; a new team's checklist."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.datasets.conftest import contract_row, write_parquet
from webapp.accounts.models import Membership, Role, Team
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.tools.models import TeamReward, TeamTool, ToolStatus

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

# Every control that changes something, by its label, on the pages a viewer can open.
WRITE_CONTROLS = re.compile(
    r"^(New experiment|Launch.*|Clone|Cancel run…|Archive|Unarchive|Restore|Delete.*|Add tag|Remove tag|"
    r"Register a tool|Upload|Prepare|Run|Score|Save.*|Start the demo.*|Add member|Create and add|Change|Remove.*)$"
)


def _write_controls(page: Any) -> list[str]:
    labels = page.locator("main button, main a.button, main input[type=submit]").all_inner_texts()
    return [label.strip() for label in labels if WRITE_CONTROLS.match(label.strip())]


def adopt(team: Team, folder: Path, name: str, data_source: str) -> Dataset:
    rows = [{**contract_row(i), "data_source": data_source} for i in range(3)]
    path = write_parquet(folder / f"{name}.parquet", rows)
    dataset, _ = Dataset.from_file(team, path, sha256=files.sha256_of(path), name=name, source="upload",
                                   validate_later=False)  # fmt: skip
    dataset.validate()
    return dataset


def test_a_viewer_sees_no_write_buttons_and_a_refused_action_explains_itself(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any, tmp_path: Path
) -> None:
    acme = personas["acme"]
    acme.add_member(personas["charlie"], Role.VIEWER)
    experiment = Experiment.objects.create(
        team=acme, name="gsm8k grpo", task="gsm8k", preset="grpo", seeds=[1]
    )
    running = Run.objects.create(
        experiment=experiment, team=acme, seed=1, name="live", status=RunStatus.RUNNING
    )
    valid, unmapped = (
        adopt(acme, tmp_path, name, source) for name, source in (("ok", "exact"), ("new", "mine/x"))
    )
    tool = TeamTool.objects.create(team=acme, name="lookup", parameters={"type": "object"}, kind="http",
                                   url="http://127.0.0.1:9/x", status=ToolStatus.READY)  # fmt: skip
    reward = TeamReward.objects.create(team=acme, name="strict", rule="exact")
    base = f"{live_server.url}/t/{acme.slug}"
    pages = ["/", "/datasets/", f"/datasets/{valid.pk}/", f"/datasets/{unmapped.pk}/", "/tools/",
             "/tools/builtin/calculator/", f"/tools/{tool.pk}/", f"/tools/rewards/{reward.pk}/", "/experiments/",
             f"/experiments/{experiment.pk}/", "/runs/", f"/runs/{running.pk}/", "/members/"]  # fmt: skip
    owner = signed_in("alice")
    owner.goto(base + f"/runs/{running.pk}/")
    assert "Cancel run…" in _write_controls(owner)  # the same page shows them to someone who may
    page = signed_in("charlie")
    for path in pages:
        page.goto(base + path)
        assert _write_controls(page) == [], path
    response = page.goto(base + "/experiments/new/")
    assert response.status == 403
    assert page.inner_text("h1") == "You cannot do that here"
    assert "viewer" in page.inner_text("#refused") and page.locator("nav.mainnav a").count() == 10
    page.click("text=Back to the Acme dashboard")
    page.wait_for_url(f"{base}/")


def test_an_owner_changes_a_role_and_removes_a_member(
    signed_in: Callable[[str], Any], live_server: Any, personas: Any
) -> None:
    acme = personas["acme"]
    bob = Membership.objects.get(team=acme, user=personas["bob"])
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/{acme.slug}/members/")
    page.select_option(f"#role-{bob.pk}", "viewer")
    page.click("tr[data-user=bob] button:text('Change')")
    page.wait_for_selector("text=bob is now a viewer of Acme.")
    assert Membership.objects.get(pk=bob.pk).role == Role.VIEWER
    page.click("a[aria-label='Remove bob']")
    assert page.inner_text("h1") == "Remove bob from Acme?"  # asked first
    assert Membership.objects.filter(pk=bob.pk).exists()
    page.click("#confirm-delete")
    page.wait_for_selector("text=Removed bob from Acme.")
    assert not Membership.objects.filter(pk=bob.pk).exists()
    assert page.locator("tr[data-user=bob]").count() == 0


def test_a_new_teams_checklist_guides_until_every_step_is_done(
    signed_in: Callable[[str], Any], live_server: Any, transactional_db: Any, settings: Any
) -> None:
    from django.contrib.auth import get_user_model

    settings.TOOL_ALLOWLIST = ["127.0.0.1:9"]  # the tool she registers may call only this (docs/security.md)

    dora = get_user_model().objects.create_user("dora", "dora@example.com")
    lab = Team.create_with_owner("Dora's lab", dora)
    page = signed_in("dora")
    page.goto(f"{live_server.url}/t/{lab.slug}/")
    assert "Nothing has run in Dora's lab yet" in page.inner_text("#welcome")
    assert page.locator("#checklist li.done").count() == 0
    page.click("#start-demo")  # the one-click demo, in her own team
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get(team=lab)
    assert run.status == RunStatus.QUEUED and run.experiment.task == "lookup" and run.kind == "sft"
    page.goto(f"{live_server.url}/t/{lab.slug}/")
    assert page.locator("#welcome").count() == 0
    done = page.locator("#checklist li.done").evaluate_all("(items) => items.map((i) => i.dataset.step)")
    assert done == ["dataset", "experiment", "run"]
    page.click("#checklist a:text('Register or try a tool')")
    page.click("text=Register a tool")
    page.fill("#id_name", "kv_lookup")  # "lookup" is the lookup recipe's built-in tool
    page.fill("#id_url", "http://127.0.0.1:9/lookup")
    page.click("form.tool-form button[type=submit]")
    page.wait_for_url("**/tools/*/")
    page.goto(f"{live_server.url}/t/{lab.slug}/")
    assert page.locator("#checklist").count() == 0  # every step done: the checklist is gone
