"""What every view on /mlflow/ shares: the request body is read to its end before the answer goes
out, whatever the answer (docs/mlflow.md#calls-not-served).

gunicorn's threaded workers keep the connection alive after an answer; a body the view never read
is still in the socket, is taken for the start of the next request, and that request then waits
for bytes that never come (the client sees a 15 s stall, then a dropped connection).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase

View = Callable[..., HttpResponseBase]
_CHUNK = 64 * 1024


def reads_body(view: View) -> View:
    """The view, then whatever of the body it left unread, read and dropped."""

    @functools.wraps(view)
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        drain(request)
        return response

    answer.reads_body = reads_body  # type: ignore[attr-defined]  # what the route test looks for
    return answer


def drain(request: HttpRequest) -> None:
    if hasattr(request, "_body"):  # read whole already (request.body)
        return
    # Django's stream stops at Content-Length; read in pieces so a refused upload costs no memory.
    while request.read(_CHUNK):
        pass
