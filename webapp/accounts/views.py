from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.accounts.access import get_member_for_owner, get_membership, get_team_for_user
from webapp.accounts.forms import (
    AddMemberForm,
    ApiTokenForm,
    CreateMemberForm,
    RoleForm,
    SwitchTeamForm,
    TeamForm,
)
from webapp.accounts.middleware import SESSION_KEY
from webapp.accounts.models import ApiToken, LastOwner, Role, Team
from webapp.confirm import confirm_delete


@login_required
def home(request: HttpRequest) -> HttpResponse:
    team = request.current_team  # type: ignore[attr-defined]
    if team is None:
        return redirect("teams")
    return redirect("dashboard", team_slug=team.slug)


@login_required
def teams(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = Team.create_with_owner(form.cleaned_data["name"], request.user)
        request.session[SESSION_KEY] = team.pk
        messages.success(request, f"Created team {team.name}.")
        return redirect("dashboard", team_slug=team.slug)
    memberships = request.user.memberships.select_related("team")  # type: ignore[union-attr]
    return render(request, "accounts/teams.html", {"form": form, "memberships": memberships})


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    form = SwitchTeamForm(request.POST)
    if not form.is_valid():
        return redirect("home")
    team = get_team_for_user(request, form.cleaned_data["team"])
    request.session[SESSION_KEY] = team.pk
    return redirect("dashboard", team_slug=team.slug)


@login_required
def members(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Who is in the team; owners add existing users here (POST)."""
    membership = get_membership(request, team_slug)
    form = AddMemberForm(request.POST or None)
    if request.method == "POST":
        team = get_team_for_user(request, team_slug, role=Role.OWNER)
        if form.is_valid():
            team.add_member(form.cleaned_data["username"], form.cleaned_data["role"])
            messages.success(
                request,
                f"{form.cleaned_data['username']} is now a {form.cleaned_data['role']} of {team.name}.",
            )
            return redirect("members", team_slug=team.slug)
    return _members_page(request, membership.team, add_form=form)


def _members_page(
    request: HttpRequest,
    team: Team,
    *,
    add_form: AddMemberForm | None = None,
    create_form: CreateMemberForm | None = None,
) -> HttpResponse:
    context = {
        "team": team,
        "memberships": team.memberships.select_related("user").order_by("user__username"),
        "form": add_form or AddMemberForm(),
        "create_form": create_form or CreateMemberForm(),
        "roles": Role.choices,
    }
    bound = (add_form and add_form.is_bound) or (create_form and create_form.is_bound)
    return render(request, "accounts/members.html", context, status=400 if bound else 200)


@login_required
@require_POST
def member_create(request: HttpRequest, team_slug: str) -> HttpResponse:
    """An owner makes an account for someone new and adds it to the team."""
    team = get_team_for_user(request, team_slug, role=Role.OWNER)
    form = CreateMemberForm(request.POST)
    if not form.is_valid():
        return _members_page(request, team, create_form=form)
    data = form.cleaned_data
    user = get_user_model().objects.create_user(data["new_username"], data["email"], data["password"])
    team.add_member(user, data["new_role"])
    messages.success(request, f"Created {user.username}, a {data['new_role']} of {team.name}.")
    return redirect("members", team_slug=team.slug)


def _owner_change(request: HttpRequest, change: Callable[[], None], done: str) -> bool:
    """Make a membership change an owner asked for; say ``done``, or why the team refused it (its last
    owner must stay). True when it was made."""
    try:
        change()
    except LastOwner as error:
        messages.error(request, str(error))
        return False
    messages.success(request, done)
    return True


@login_required
@require_POST
def member_role(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    membership = get_member_for_owner(request, team_slug, pk)
    team = membership.team
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose owner, member or viewer.")
    else:
        role = form.cleaned_data["role"]
        _owner_change(
            request,
            lambda: team.change_role(membership, role),
            f"{membership.user} is now a {role} of {team.name}.",
        )
    return redirect("members", team_slug=team.slug)


@login_required
@require_http_methods(["GET", "POST"])
def member_remove(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """GET: ask first; POST: remove the member from the team."""
    membership = get_member_for_owner(request, team_slug, pk)
    team = membership.team
    if request.method != "POST":
        leaving = "you" if membership.user == request.user else str(membership.user)
        return confirm_delete(
            request,
            team,
            title=f"Remove {leaving} from {team.name}?",
            consequence=f"{leaving.capitalize()} no longer see{'' if leaving == 'you' else 's'} the team; "
            "what they made (datasets, experiments, runs) stays with it. An owner can add them again.",
            button=f"Remove {leaving}",
            back=reverse("members", args=[team.slug]),
        )
    removed = _owner_change(
        request, lambda: team.remove_member(membership), f"Removed {membership.user} from {team.name}."
    )
    if removed and membership.user == request.user:  # an owner who left their own team can no longer see it
        return redirect("teams")
    return redirect("members", team_slug=team.slug)


@login_required
def api_tokens(request: HttpRequest) -> HttpResponse:
    """Personal API tokens: create one (shown once), see and revoke the others."""
    form = ApiTokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        _token, created = ApiToken.issue(
            request.user, form.cleaned_data["name"], scopes=form.scopes(), expires=form.expires()
        )
        form = ApiTokenForm()
    tokens = ApiToken.objects.filter(user=request.user)  # type: ignore[misc]
    return render(request, "accounts/tokens.html", {"form": form, "created": created, "tokens": tokens})


@login_required
@require_POST
def revoke_api_token(request: HttpRequest, pk: int) -> HttpResponse:
    # A token of someone else is a 404, like everything outside one's reach.
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    if token.revoke():
        messages.success(request, f"Revoked {token.name}.")
    return redirect("api_tokens")
