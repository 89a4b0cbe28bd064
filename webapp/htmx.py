"""htmx helpers: the request type of views that read ``request.htmx`` (set by django-htmx's
HtmxMiddleware) and the answer to a poll."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def render_poll(request: HttpRequest, template: str, context: dict[str, Any], *, done: bool) -> HttpResponse:
    """A fragment an ``hx-trigger="every Ns"`` asked for; once ``done``, django-htmx's stop-polling
    response (HTTP 286) carries it, so htmx swaps it in and polls no more."""
    if not done:
        return render(request, template, context)
    return HttpResponseStopPolling(render_to_string(template, context, request))
