"""The personal API token of people and scripts (Bearer ``sk_...``, docs/api.md#tokens): the
authentication of every ``/api/t/{team}/...`` router."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.accounts.models import ApiToken, Scope
from webapp.accounts.throttle import check_token_allowed, token_failed, token_is_known

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class UserTokenAuth(HttpBearer):
    """A personal API token; sets ``request.user`` so the apps' access helpers apply unchanged. A
    token without the write scope may only read (403 on anything else), and an expired one is dead
    (docs/api.md#tokens)."""

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        check_token_allowed(request)
        found = ApiToken.find(token)
        if found is None:
            if not token_is_known(token):
                token_failed(request)
            return None
        request.user = found.user
        request.api_token = found  # type: ignore[attr-defined]
        if request.method not in SAFE_METHODS and not found.allows(Scope.WRITE):
            raise PermissionDenied(f"the token {found.name!r} may only read (it lacks the write scope)")
        return found.user
