"""The personal API token of people and scripts (Bearer ``sk_...``, docs/api.md#tokens): the
authentication of every ``/api/t/{team}/...`` router."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.accounts.access import check_token_scope
from webapp.accounts.models import ApiToken
from webapp.accounts.throttle import admit_bearer

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class UserTokenAuth(HttpBearer):
    """A personal API token; sets ``request.user`` so the apps' access helpers apply unchanged. A
    token without the write scope may only read (403 on anything else), and an expired one is dead
    (docs/api.md#tokens)."""

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        found = ApiToken.find(token)
        admit_bearer(request, token, found)
        if found is None:
            return None
        request.user = found.user
        request.api_token = found  # type: ignore[attr-defined]
        check_token_scope(found, write=request.method not in SAFE_METHODS)
        return found.user
