"""How the trainer's HTTP calls reach the web app, fail and wait: one connection and one policy for
the HTTP reporter and the run API client alike (docs/reliability.md#retries).

:func:`run_api_client` is the connection both use: the API's base URL, the run's Bearer token and,
once the run is claimed, the claimant id.

A 5xx or 429 answer is :class:`RetryableHttpError` (the server may take the same request later), any
other non-2xx is :class:`PermanentHttpError` (never retried); :class:`Backoff` is tenacity's wait
between tries, and :data:`POLICY` the one policy: its backoff for every call, and how long a call
that cannot wait in a spool (the claim, the config and dataset reads) keeps trying.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from trainer.contract import CLAIMANT_HEADER


class RetryableHttpError(Exception):
    """A 5xx or 429 answer: the server may take the same request later."""

    def __init__(self, status_code: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


class PermanentHttpError(Exception):
    """Any other non-2xx answer: sending the same request again cannot help."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(f"HTTP {status_code}: {body[:500]}")
        self.status_code = status_code
        self.body = body


def run_api_client(
    api_url: str,
    token: str,
    *,
    timeout_s: float,
    claimant: str = "",
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    if claimant:
        headers[CLAIMANT_HEADER] = claimant
    return httpx.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)


def raise_for_status(response: httpx.Response) -> None:
    code = response.status_code
    if 200 <= code < 300:
        return
    if code == 429 or code >= 500:
        raise RetryableHttpError(code, _retry_after(response))
    raise PermanentHttpError(code, response.text)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None  # absent, or an HTTP date: fall back to our own backoff


RETRYABLE = (httpx.TransportError, RetryableHttpError)


@dataclass(frozen=True)
class Backoff:
    """Tenacity wait: exponential from ``initial_s`` up to ``max_s`` with jitter; honours Retry-After."""

    initial_s: float
    max_s: float

    def __call__(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RetryableHttpError) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_s)
        exponential = self.initial_s * 2.0 ** min(state.attempt_number - 1, 60)
        # Jitter, so that many trainers do not hammer a restarted server in lockstep.
        jitter = random.uniform(-0.5, 0.5) * self.initial_s
        return max(0.0, min(exponential + jitter, self.max_s))


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff from ``initial_s`` doubling up to ``max_s`` (with jitter, Retry-After honoured); a call
    gives up after ``give_up_after_s`` unless its caller brings its own stop. The reporter does: its
    batches wait on disk, so it retries for as long as the run runs and then until its close deadline."""

    initial_s: float = 0.5
    max_s: float = 30.0
    # Long enough for a web server restart or a database failover; a trainer that cannot claim its
    # run in this time exits failed, and the reaper finishes the run.
    give_up_after_s: float = 600.0

    def retrying(
        self, stop: Callable[[tenacity.RetryCallState], bool] | None = None, **hooks: Any
    ) -> tenacity.Retrying:
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(RETRYABLE),
            wait=Backoff(self.initial_s, self.max_s),
            stop=stop or tenacity.stop_after_delay(self.give_up_after_s),
            reraise=True,
            **hooks,
        )


POLICY = RetryPolicy()
