"""Lock-outs after failed logins and bad bearer tokens, counted by django-axes (docs/security.md#throttling).

Logins (the login page, the admin's) go through axes' authentication backend as they are: counted
per account and address. Bearer tokens do not pass through Django's ``authenticate``, so their checks
report here (:func:`admit_bearer`), counted per identity the token claims and address, never per
address alone: a personal token under its hint and account when a stored token has that hint
("sk_AbCdEf of alice"), any other text under one pseudo name. A token that matches nothing (not a
revoked one, nor a finished run's, which are known and merely dead) counts as a failure; once an
identity has STUDIO_LOGIN_FAILURE_LIMIT of them from an address, tokens claiming it from there get 429
until the cool-off ends. So ten bad tokens lock out those guesses, not the good tokens sent from the
same host; and a live run's token is never locked out: nothing but its own run's end stops it.
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

# The start of the "user names" bad tokens are counted under, apart from any real account's logins.
BEARER = "(bearer token)"


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
    """Too many unknown bearer tokens claiming this one's identity came from the caller's address;
    answered 429 with Retry-After."""

    def __init__(self) -> None:
        super().__init__(
            "too many unknown bearer tokens like this one from this address; try again after the "
            f"cool-off ({retry_after_s()} s)"
        )


def retry_after_s() -> int:
    cool_off = get_cool_off()
    return int(cool_off.total_seconds()) if cool_off else 0


def admit_bearer(request: HttpRequest, token: str, found: Any | None, *, run_token: bool = False) -> None:
    """The lock-outs for a bearer token just looked up; ``found`` is what it authenticates (a
    personal token, a run), None when it matched nothing. TokenLockedOut when the identity it claims
    is locked out at the caller's address; a failure counted when it matched nothing and was never
    issued. A live run's token (``run_token``) passes whatever else its address sent."""
    if run_token and found is not None:
        return
    credentials = {"username": _claimed_identity(token, found)}
    if not AxesProxyHandler.is_allowed(request, credentials):
        raise TokenLockedOut
    if found is None and not token_is_known(token):
        user_login_failed.send(sender=__name__, credentials=credentials, request=request)


def _claimed_identity(token: str, found: Any | None) -> str:
    from webapp.accounts.models import ApiToken

    if isinstance(found, ApiToken):
        return f"{BEARER} {found.hint} of {found.user.get_username()}"
    if token.startswith(ApiToken.PREFIX):
        hint = token[: ApiToken.HINT_LENGTH]
        owner = ApiToken.objects.filter(hint=hint).values_list("user__username", flat=True).first()
        if owner is not None:
            return f"{BEARER} {hint} of {owner}"
    return f"{BEARER} naming no token"


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
