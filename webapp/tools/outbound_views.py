"""The Outbound targets page (docs/security.md#outbound): every signed-in user sees where team
requests may go and who allowed it; site administrators allow and remove targets here."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.access import is_site_admin, require_site_admin
from webapp.tools.access import get_target_for_admin
from webapp.tools.forms import OutboundTargetForm
from webapp.tools.outbound import OutboundTarget, floor_rules

# The removed targets the page lists (the newest first); the API lists them all.
SHOWN_REMOVED = 50


@login_required
def targets(request: HttpRequest) -> HttpResponse:
    form = OutboundTargetForm(request.POST or None)
    if request.method == "POST":
        require_site_admin(request)
        if form.is_valid():
            target = OutboundTarget.allow(
                form.cleaned_data["rule"], request.user, note=form.cleaned_data["note"]
            )
            messages.success(
                request, f"Allowed {target.rule}: team tools, rewards and webhooks may call it now."
            )
            return redirect("outbound_targets")
    return render(
        request, "tools/outbound.html", _context(request, form), status=400 if form.is_bound else 200
    )


def _context(request: HttpRequest, form: OutboundTargetForm) -> dict[str, Any]:
    found = OutboundTarget.objects.select_related("allowed_by", "removed_by")
    return {
        "form": form,
        "is_admin": is_site_admin(request.user),
        "floor": floor_rules(),
        "live": found.filter(removed_at__isnull=True),
        "removed": found.filter(removed_at__isnull=False).order_by("-removed_at")[:SHOWN_REMOVED],
    }


@login_required
@require_POST
def remove(request: HttpRequest, pk: int) -> HttpResponse:
    target = get_target_for_admin(request, pk)
    if target.remove(request.user):
        messages.success(request, f"Removed {target.rule}: nothing new calls it from now on.")
    return redirect("outbound_targets")


def allow_asked(request: HttpRequest, note: str) -> None:
    """A registration form's "allow this" button: the administrator allows the target it names
    (403 for anyone else), and the registration then goes on with it allowed."""
    text = request.POST.get("allow_target", "")
    if not text:
        return
    require_site_admin(request)
    try:
        target = OutboundTarget.allow(text, request.user, note=note)
    except ValueError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Allowed {target.rule}.")
