"""The run page's retention change (docs/rollouts.md#retention)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from webapp.experiments.access import get_run_for_user
from webapp.ingestion.tasks import change_retention
from webapp.retention.forms import RetentionForm


@login_required
@require_POST
def run_retention(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    """Set the run's retention policy; what it drops of the stored trajectories goes in the background."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    form = RetentionForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(
            f"{form.fields[name].label}: {' '.join(str(e) for e in errors)}"
            for name, errors in form.errors.items()
        )
        messages.error(request, f"Retention not changed: {problems}")
        return redirect("run", team_slug=team_slug, pk=run.pk)
    policy = form.retention_policy()
    change_retention(run, policy)
    messages.success(
        request,
        f"This run now keeps {policy.describe()}. What the policy drops of the stored trajectories is being "
        "deleted and its space reclaimed; it does not bring back what an earlier policy dropped.",
    )
    return redirect("run", team_slug=team_slug, pk=run.pk)
