"""The per-run token of a trainer process (trainer.contract): the authentication of the routers the
trainer calls, and the one access helper for the run its request names."""

from __future__ import annotations

from django.http import Http404, HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from trainer.contract import CLAIMANT_HEADER
from webapp.accounts.throttle import admit_bearer
from webapp.experiments.models import Run, hash_token


class RunTokenAuth(HttpBearer):
    """The per-run token a trainer process gets at launch; ``request.auth`` is its Run (while it lives)."""

    def authenticate(self, request: HttpRequest, token: str) -> Run | None:
        run = Run.for_token(token)
        admit_bearer(request, token, run, run_token=True)
        return run


def get_run_for_token(request: HttpRequest, run_id: int) -> Run:
    """The run a trainer's request names, which must be its token's own: any other run is a 404."""
    run: Run = request.auth  # type: ignore[attr-defined]
    if run.pk != run_id:
        raise Http404("no such run")
    return run


def get_run_for_claimant(request: HttpRequest, run_id: int) -> Run:
    """:func:`get_run_for_token` for a call that changes the run: only the process that claimed it
    may (its claimant id in the CLAIMANT_HEADER); any other is a 409 and changes nothing."""
    run = get_run_for_token(request, run_id)
    if not run.is_claimant(request.headers.get(CLAIMANT_HEADER, "")):
        who = "no process has claimed it yet" if not run.claimant else "another process claimed it"
        raise HttpError(409, f"this process may not change run {run.pk}: {who}")
    return run


def run_token_issued(token: str) -> bool:
    """A run's token, once issued: dead with its run, but not a guess (accounts.throttle asks)."""
    return Run.objects.filter(token_hash=hash_token(token)).exists()
