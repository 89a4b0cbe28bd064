from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from webapp.accounts.models import Membership, Role

TEAM_PAGES = ["dashboard", "members", "datasets", "tools", "experiments", "compare"]


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
    assert response.status_code == 200
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
