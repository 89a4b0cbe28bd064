"""The confirmation page every delete opens first (docs/guide.md#confirmations).

A delete link leads to its URL by GET, which answers this page: what goes, what stays, and the one
button that deletes (a POST to the same URL) beside a way back. No JavaScript is involved, so the
question is asked the same way everywhere, and a page without scripts asks it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

if TYPE_CHECKING:  # the pages' team; this module sits below the apps (pyproject.toml's layers)
    from webapp.accounts.models import Team


def confirm_delete(
    request: HttpRequest,
    team: Team | None,
    *,
    title: str,
    consequence: str,
    button: str,
    back: str,
    refusal: str = "",
) -> HttpResponse:
    """The page asking ``title``: ``consequence`` says what goes and what stays, ``button`` deletes
    (POST to the same URL), ``back`` leads away; ``refusal``: why it cannot be deleted (no button)."""
    context = {
        "team": team,
        "title": title,
        "consequence": consequence,
        "button": button,
        "back": back,
        "refusal": refusal,
    }
    return render(request, "_confirm.html", context)
