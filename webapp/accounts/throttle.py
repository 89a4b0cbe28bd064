"""Lock-outs after failed logins and bad bearer tokens, counted by django-axes (docs/security.md#throttling).

Logins (the login page, the admin's) go through axes' authentication backend as they are. Bearer
tokens do not pass through Django's ``authenticate``, so their checks report here: a token that
matches nothing (not a revoked one, nor a finished run's, which are known and merely dead) counts as
a failed attempt of the caller's address under one pseudo user name, and once the address has
STUDIO_LOGIN_FAILURE_LIMIT of them, every bearer token from it gets 429 until the cool-off ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from webapp.middleware import API_PREFIX

# The "user name" bad tokens are counted under: per address, apart from any real account's logins.
BEARER = "(bearer token)"
_CREDENTIALS = {"username": BEARER}


class WebLoginThrottle(AxesStandaloneBackend):
    """django-axes' check, for logins that came over HTTP. ``authenticate()`` without a request (a
    management command, the test client's ``login``) is no network guess, so there is nothing to count."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


class TokenLockedOut(Exception):
    """The caller's address sent too many unknown bearer tokens; answered 429 with Retry-After."""

    def __init__(self) -> None:
        super().__init__(
            "too many unknown bearer tokens from this address; try again after the cool-off "
            f"({retry_after_s()} s)"
        )


def retry_after_s() -> int:
    cool_off = get_cool_off()
    return int(cool_off.total_seconds()) if cool_off else 0


def check_token_allowed(request: HttpRequest) -> None:
    """TokenLockedOut when the caller's address is locked out for bearer tokens."""
    if not AxesProxyHandler.is_allowed(request, _CREDENTIALS):
        raise TokenLockedOut


# How the apps above this one tell a token they issued (a run's): each registers its check from its
# AppConfig.ready(), since accounts imports none of them (docs/architecture.md#layers).
ISSUED_TOKEN_CHECKS: list[Callable[[str], bool]] = []


def register_issued_tokens(check: Callable[[str], bool]) -> None:
    if check not in ISSUED_TOKEN_CHECKS:
        ISSUED_TOKEN_CHECKS.append(check)


def token_is_known(token: str) -> bool:
    """A token once issued (a revoked personal one, a finished run's): dead, but not a guess."""
    from webapp.accounts.models import ApiToken

    return ApiToken.is_known(token) or any(check(token) for check in ISSUED_TOKEN_CHECKS)


def token_failed(request: HttpRequest) -> None:
    """Count a bearer token that matched nothing against the caller's address."""
    user_login_failed.send(sender=__name__, credentials=_CREDENTIALS, request=request)


def locked_out(request: HttpRequest, response: HttpResponse | None, credentials: Any) -> HttpResponse:
    """django-axes' answer to a locked-out login: 429 with the wait, a page or the API's error shape."""
    wait = retry_after_s()
    message = f"Too many failed attempts: try again in {max(1, wait // 60)} minutes."
    if request.path.startswith(API_PREFIX):
        from webapp.api import error_body

        answer: HttpResponse = JsonResponse(error_body(message, 429), status=429)
    else:
        answer = render(request, "registration/locked_out.html", {"message": message}, status=429)
    answer["Retry-After"] = str(wait)
    return answer
