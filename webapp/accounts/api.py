"""REST (personal API token): a team's members and their roles (owners change them), and the
caller's own personal tokens with their scopes and expiry (docs/api.md#tokens)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from ninja.errors import AuthenticationError, HttpError

from webapp.accounts.access import get_member_for_owner, get_team_for_user
from webapp.accounts.models import ApiToken, LastOwner, Membership, Role, TokenRevoked
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, StrictSchema

router = Router(auth=UserTokenAuth(), tags=["members"])
tokens_router = Router(auth=UserTokenAuth(), tags=["tokens"])

RoleName = Literal["owner", "member", "viewer"]
ScopeName = Literal["read", "write"]
MAX_TOKEN_DAYS = 3650


class MemberOut(Schema):
    id: int = Field(description="The membership's id (what PATCH and DELETE name).")
    username: str
    role: str
    joined: datetime

    @staticmethod
    def resolve_username(obj: Membership) -> str:
        return str(obj.user.get_username())


class MemberAdd(StrictSchema):
    username: str = Field(min_length=1, max_length=150, description="Someone who has an account here.")
    role: RoleName = "member"


class MemberChange(StrictSchema):
    role: RoleName


@router.get("/{team_slug}/members", response=list[MemberOut], summary="The team's members and roles")
def members(request: HttpRequest, team_slug: str) -> Any:
    team = get_team_for_user(request, team_slug)
    return team.memberships.select_related("user").order_by("user__username")


@router.post("/{team_slug}/members", response={201: MemberOut}, summary="Add a member (owners)")
def add_member(request: HttpRequest, team_slug: str, body: MemberAdd) -> Any:
    team = get_team_for_user(request, team_slug, role=Role.OWNER)
    user = get_user_model().objects.filter(username=body.username).first()
    if user is None:
        raise FieldError([("username", f"no user named {body.username!r}")])
    return Status(201, team.add_member(user, body.role))


@router.patch("/{team_slug}/members/{int:pk}", response=MemberOut, summary="Change a role (owners)")
def change_member(request: HttpRequest, team_slug: str, pk: int, body: MemberChange) -> Any:
    membership = get_member_for_owner(request, team_slug, pk)
    try:
        membership.team.change_role(membership, body.role)
    except LastOwner as error:
        raise HttpError(409, str(error)) from None
    membership.refresh_from_db()
    return membership


@router.delete("/{team_slug}/members/{int:pk}", response={204: None}, summary="Remove a member (owners)")
def remove_member(request: HttpRequest, team_slug: str, pk: int) -> Any:
    membership = get_member_for_owner(request, team_slug, pk)
    try:
        membership.team.remove_member(membership)
    except LastOwner as error:
        raise HttpError(409, str(error)) from None
    return Status(204, None)


# -- the caller's own tokens ----------------------------------------------------------------------


class TokenOut(Schema):
    id: int
    name: str
    hint: str = Field(description="The token's first characters.")
    scopes: list[str]
    created: datetime
    expires: datetime | None
    last_used: datetime | None
    revoked: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The token itself: shown this once, never again.")


def _both_scopes() -> list[ScopeName]:
    return ["read", "write"]


class TokenCreate(StrictSchema):
    name: str = Field(min_length=1, max_length=100)
    scopes: list[ScopeName] = Field(
        default_factory=_both_scopes,
        min_length=1,
        max_length=2,
        description="read: every GET; write: everything else (it implies read).",
    )
    expires_in_days: int | None = Field(None, ge=1, le=MAX_TOKEN_DAYS, description="None: until revoked.")


@tokens_router.get("/tokens", response=list[TokenOut], summary="Your personal API tokens")
def tokens(request: HttpRequest) -> Any:
    return ApiToken.objects.filter(user=request.user)  # type: ignore[misc]


@tokens_router.post("/tokens", response={201: TokenCreated}, summary="Issue a personal API token")
def issue_token(request: HttpRequest, body: TokenCreate) -> Any:
    """A token may issue others with at most its own scopes, expiring no later than it does; they
    die with it (revoking it revokes them)."""
    caller: ApiToken = request.api_token  # type: ignore[attr-defined]
    wider = sorted(set(body.scopes) - set(caller.scopes))
    if wider:
        raise FieldError([("scopes", f"this token lacks {', '.join(wider)}: it cannot grant it")])
    expires = timezone.now() + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    if caller.expires is not None and (expires is None or expires > caller.expires):
        expires = caller.expires
    try:
        token, plain = ApiToken.issue(
            request.user, body.name, scopes=list(body.scopes), expires=expires, parent=caller
        )
    except TokenRevoked:
        raise AuthenticationError from None  # revoked while this request ran: as if a moment later
    return Status(201, {**TokenOut.from_orm(token).dict(), "token": plain})


@tokens_router.delete(
    "/tokens/{int:pk}", response={204: None}, summary="Revoke one of your tokens and those it issued"
)
def revoke_token(request: HttpRequest, pk: int) -> Any:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    token.revoke()
    return Status(204, None)
