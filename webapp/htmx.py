"""How views answer htmx: which partial a request asks for, and how a poll ends.

A page's fragments are named partials of its template (``page.html#name``), each rendering one
element with an id. htmx names the element it swaps in the ``HX-Target`` header, so that id is
the one way a view tells which fragment to render.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """The request type of views that read ``request.htmx`` (set by django-htmx's HtmxMiddleware)."""

    htmx: HtmxDetails


def swaps(request: HttpRequest, element_id: str) -> bool:
    """True when the request is htmx's, for the element ``#element_id``."""
    htmx = getattr(request, "htmx", None)
    return htmx is not None and bool(htmx) and htmx.target == element_id


def template_for(request: HttpRequest, page: str, partials: Mapping[str, str]) -> str:
    """``page#name`` when htmx swaps an element that ``partials`` maps (element id → partial name)
    to one of the page's partials; else the whole ``page``."""
    for element_id, name in partials.items():
        if swaps(request, element_id):
            return f"{page}#{name}"
    return page


def render_poll(
    request: HttpRequest, template: str, context: dict[str, Any], *, done: bool, reload: bool = False
) -> HttpResponse:
    """The answer to an ``hx-trigger="every Ns"`` poll: the fragment while the work goes on. Once it is
    ``done``, htmx's stop-polling response: with the fragment's last state, or, with ``reload``, empty
    and reloading the page (when the finished state shows more than the fragment holds)."""
    if reload and done:
        return HttpResponseStopPolling(headers={"HX-Refresh": "true"})
    content = render_to_string(template, context, request)
    return HttpResponseStopPolling(content) if done else HttpResponse(content)
