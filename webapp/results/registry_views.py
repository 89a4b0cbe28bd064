"""The checkpoint registry page and the tags members put on checkpoints (docs/checkpoints.md#the-registry)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from webapp.accounts.access import get_team_for_user
from webapp.htmx import swaps, template_for
from webapp.ingestion.models import MAX_CHECKPOINT_TAG
from webapp.results.checkpoint_registry import SORTS, STATES, RegistryQuery, registry_page, team_tags, totals
from webapp.results.checkpoints import get_checkpoint_for_user

SUGGESTED_TAGS = ("best", "candidate")


@login_required
def registry(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    query = RegistryQuery.of(request.GET)
    page, rows = registry_page(team, query)
    context = {
        "team": team,
        "query": query,
        "page": page,
        "previous": query.query_string(page.previous_page_number()) if page.has_previous() else "",
        "next": query.query_string(page.next_page_number()) if page.has_next() else "",
        "rows": rows,
        "totals": totals(team, query),
        "tags": sorted({*team_tags(team), *SUGGESTED_TAGS}),
        "sorts": list(SORTS),
        "states": STATES,
        "experiments": team.experiments.order_by("name").values_list("pk", "name"),
        "max_tag": MAX_CHECKPOINT_TAG,
    }
    return render(
        request, template_for(request, "results/checkpoints.html", {"registry": "registry"}), context
    )


@login_required
@require_POST
def checkpoint_tags(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """Add (``add``) or remove (``remove``) one tag; htmx gets the checkpoint's tags cell back."""
    checkpoint = get_checkpoint_for_user(request, team_slug, pk, write=True)
    add = request.POST.get("add", "").strip()[:MAX_CHECKPOINT_TAG]
    checkpoint.change_tags(add=add, remove=request.POST.get("remove", ""))
    if swaps(request, f"tags-{checkpoint.pk}"):
        context = {"team": checkpoint.run.team, "checkpoint": checkpoint, "max_tag": MAX_CHECKPOINT_TAG}
        return render(request, "results/_checkpoint_tags.html", context)
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("checkpoint_registry", team_slug=team_slug)
