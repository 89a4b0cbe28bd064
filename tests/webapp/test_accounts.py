from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from webapp.accounts.models import Membership, Role

TEAM_PAGES = ["dashboard", "members", "datasets", "tools", "experiments", "runs", "curves", "compare"]


def client_for(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


@pytest.mark.parametrize("page", TEAM_PAGES)
def test_team_pages_open_for_members_and_404_for_outsiders(personas: Any, page: str) -> None:
    url = f"/t/{personas['acme'].slug}/" + ("" if page == "dashboard" else f"{page}/")
    assert client_for("alice").get(url).status_code == 200
    assert client_for("bob").get(url).status_code == 200
    assert client_for("charlie").get(url).status_code == 404


def test_anonymous_users_are_sent_to_login(personas: Any) -> None:
    response = Client().get(f"/t/{personas['acme'].slug}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_home_redirects_to_the_current_teams_dashboard(personas: Any) -> None:
    response = client_for("alice").get("/")
    assert response["Location"] == f"/t/{personas['acme'].slug}/"


def test_owner_adds_a_member_with_a_role(personas: Any) -> None:
    acme = personas["acme"]
    response = client_for("alice").post(f"/t/{acme.slug}/members/", {"username": "charlie", "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(team=acme, user=personas["charlie"]).role == Role.VIEWER
    assert client_for("charlie").get(f"/t/{acme.slug}/").status_code == 200


def test_a_member_cannot_add_members(personas: Any) -> None:
    acme = personas["acme"]
    response = client_for("bob").post(f"/t/{acme.slug}/members/", {"username": "charlie", "role": "owner"})
    assert response.status_code == 403
    assert not Membership.objects.filter(team=acme, user=personas["charlie"]).exists()


def test_an_outsider_cannot_add_himself(personas: Any) -> None:
    acme = personas["acme"]
    response = client_for("charlie").post(
        f"/t/{acme.slug}/members/", {"username": "charlie", "role": "owner"}
    )
    assert response.status_code == 404
    assert not Membership.objects.filter(team=acme, user=personas["charlie"]).exists()


def test_adding_an_unknown_user_shows_an_error(personas: Any) -> None:
    response = client_for("alice").post(
        f"/t/{personas['acme'].slug}/members/", {"username": "mallory", "role": "member"}
    )
    assert response.status_code == 400
    assert "No user named" in response.content.decode()


def test_the_team_switcher_changes_the_current_team(personas: Any) -> None:
    alice = client_for("alice")
    alice.post("/teams/", {"name": "Second team"})
    assert alice.get("/")["Location"] == "/t/second-team/"
    alice.post("/teams/switch/", {"team": personas["acme"].slug})
    assert alice.get("/")["Location"] == f"/t/{personas['acme'].slug}/"


def test_switching_to_a_team_you_are_not_in_is_a_404(personas: Any) -> None:
    response = client_for("alice").post("/teams/switch/", {"team": personas["other"].slug})
    assert response.status_code == 404


def test_the_admin_is_for_staff_only(personas: Any, admin_client: Client) -> None:
    assert admin_client.get("/admin/accounts/team/").status_code == 200
    assert client_for("alice").get("/admin/accounts/team/").status_code == 302


def test_visiting_a_teams_page_makes_it_the_current_team(personas: Any) -> None:
    personas["other"].add_member(personas["alice"], "viewer")
    alice = client_for("alice")
    page = alice.get(f"/t/{personas['other'].slug}/datasets/")
    assert page.context["current_team"] == personas["other"]
    assert alice.get("/")["Location"] == f"/t/{personas['other'].slug}/"
    # an outsider's current team does not move to a team he cannot see
    charlie = client_for("charlie")
    charlie.get(f"/t/{personas['acme'].slug}/")
    assert charlie.get("/")["Location"] == f"/t/{personas['other'].slug}/"


def test_an_owner_changes_a_role_and_removes_a_member_but_never_the_last_owner(personas: Any) -> None:
    acme = personas["acme"]
    alice = client_for("alice")
    bob = Membership.objects.get(team=acme, user=personas["bob"])
    me = Membership.objects.get(team=acme, user=personas["alice"])
    assert alice.post(f"/t/{acme.slug}/members/{bob.pk}/role/", {"role": "viewer"}).status_code == 302
    assert Membership.objects.get(pk=bob.pk).role == Role.VIEWER
    refused = alice.post(f"/t/{acme.slug}/members/{me.pk}/role/", {"role": "member"}, follow=True)
    assert "the only owner of Acme" in refused.content.decode()
    assert Membership.objects.get(pk=me.pk).role == Role.OWNER
    assert alice.post(f"/t/{acme.slug}/members/{me.pk}/remove/").status_code == 302
    assert Membership.objects.filter(pk=me.pk).exists()
    assert alice.post(f"/t/{acme.slug}/members/{bob.pk}/remove/").status_code == 302
    assert not Membership.objects.filter(pk=bob.pk).exists()
    assert client_for("bob").get(f"/t/{acme.slug}/").status_code == 404


def test_members_and_viewers_cannot_manage_members(personas: Any) -> None:
    acme = personas["acme"]
    me = Membership.objects.get(team=acme, user=personas["alice"])
    bob = client_for("bob")
    assert bob.post(f"/t/{acme.slug}/members/{me.pk}/role/", {"role": "viewer"}).status_code == 403
    assert bob.post(f"/t/{acme.slug}/members/{me.pk}/remove/").status_code == 403
    assert (
        bob.post(
            f"/t/{acme.slug}/members/new/", {"new_username": "eve", "password": "x" * 20, "new_role": "owner"}
        ).status_code
        == 403
    )
    assert Membership.objects.get(pk=me.pk).role == Role.OWNER
    # another team's membership is not found from this one
    theirs = Membership.objects.get(team=personas["other"])
    assert client_for("alice").post(f"/t/{acme.slug}/members/{theirs.pk}/remove/").status_code == 404


def test_an_owner_creates_an_account_straight_into_the_team(personas: Any) -> None:
    from django.contrib.auth import get_user_model

    acme = personas["acme"]
    weak = client_for("alice").post(
        f"/t/{acme.slug}/members/new/", {"new_username": "dora", "password": "123", "new_role": "member"}
    )
    assert weak.status_code == 400 and "This password is too short" in weak.content.decode()
    data = {
        "new_username": "dora",
        "email": "dora@example.com",
        "password": "a long enough passphrase",
        "new_role": "viewer",
    }
    assert client_for("alice").post(f"/t/{acme.slug}/members/new/", data).status_code == 302
    assert Membership.objects.get(team=acme, user__username="dora").role == Role.VIEWER
    assert Client().login(username="dora", password="a long enough passphrase")
    again = client_for("alice").post(f"/t/{acme.slug}/members/new/", data)
    assert again.status_code == 400 and "already has an account" in again.content.decode()
    assert get_user_model().objects.filter(username="dora").count() == 1


def test_a_refused_action_shows_a_page_with_navigation(personas: Any) -> None:
    acme = personas["acme"]
    acme.add_member(personas["charlie"], Role.VIEWER)
    page = client_for("charlie").get(f"/t/{acme.slug}/experiments/new/")
    assert page.status_code == 403
    html = page.content.decode()
    assert (
        "You cannot do that here" in html
        and 'class="mainnav"' in html
        and "a <strong>viewer</strong>" in html
    )


def test_the_admin_shows_run_status_and_token_hashes_read_only(personas: Any, admin_client: Client) -> None:
    from webapp.accounts.models import ApiToken
    from webapp.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(team=personas["acme"], name="e", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1)
    run.issue_token()
    token, _plain = ApiToken.issue(personas["alice"], "laptop")
    run_page = admin_client.get(f"/admin/experiments/run/{run.pk}/change/").content.decode()
    assert (
        'name="status"' not in run_page and 'name="token_hash"' not in run_page and run.token_hash in run_page
    )
    assert 'name="name"' in run_page  # what a person may fix stays editable
    token_page = admin_client.get(f"/admin/accounts/apitoken/{token.pk}/change/").content.decode()
    # Revoked by the admin's action, which revokes the tokens it issued too (ApiToken.revoke).
    assert 'name="token_hash"' not in token_page and 'name="revoked_0"' not in token_page
    assert admin_client.get("/admin/accounts/apitoken/add/").status_code == 403


def test_the_admins_revoke_action_revokes_the_tokens_a_token_issued(
    personas: Any, admin_client: Client
) -> None:
    from django.contrib.admin.models import LogEntry

    from webapp.accounts.models import ApiToken

    parent, _plain = ApiToken.issue(personas["alice"], "parent")
    ApiToken.issue(personas["alice"], "child", parent=parent)
    answer = admin_client.post(
        "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [parent.pk]}
    )
    assert answer.status_code == 302
    assert not ApiToken.objects.filter(revoked=None).exists()
    assert LogEntry.objects.filter(object_id=str(parent.pk)).count() == 1


def test_only_an_administrators_logged_action_reopens_an_ended_external_run(
    personas: Any, admin_client: Client
) -> None:
    from django.contrib.admin.models import LogEntry

    from webapp.accounts.models import ApiToken
    from webapp.experiments.models import Experiment, Run, RunStatus

    experiment, _created = Experiment.create_external(personas["acme"], "logged", personas["alice"])
    run = Run.create_external(experiment, "logged", None)
    run.finish(RunStatus.SUCCEEDED)
    token = ApiToken.issue(personas["alice"], "mlflow")[1]
    body = json.dumps({"run_id": run.mlflow_run_id, "key": "m", "value": 1.0, "timestamp": 1})

    def log_metric() -> Any:
        return Client().post(
            "/mlflow/api/2.0/mlflow/runs/log-metric", body, content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )  # fmt: skip

    refused = log_metric()
    assert refused.status_code == 400 and "'active' state" in refused.json()["message"]
    answer = admin_client.post(
        "/admin/experiments/run/", {"action": "reopen_for_writes", "_selected_action": [run.pk]}
    )
    assert answer.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.finished_at) == (RunStatus.RUNNING, None)
    assert LogEntry.objects.get(object_id=str(run.pk)).change_message == "Reopened for MLflow writes."
    assert log_metric().status_code == 200
