"""A run's page: its status (polled while it runs), summary, log tail, config, params and tags,
artifacts, checkpoints, health and storage; the edit of its name, note and tags; and the change of its
retention (docs/rollouts.md#retention)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.experiments.access import get_run_for_user
from webapp.experiments.artifacts import stored as stored_artifacts
from webapp.experiments.evaluations import evaluation_summary
from webapp.experiments.forms import RunEditForm
from webapp.experiments.lifecycle import RESUMABLE
from webapp.experiments.logs import log_tail
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.sweeps import ordinal
from webapp.experiments.views import stored_config
from webapp.experiments.waiting_line import places_in_line
from webapp.form_kit import labelled_errors
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.ingestion.tasks import change_retention
from webapp.results.resume import ResumeRefused, resume, resume_step
from webapp.results.summary import summarize
from webapp.retention.forms import RetentionForm


@login_required
def run_detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, pk)
    if swaps(request, "live"):
        return render_poll(request, "experiments/run.html#live", _run_context(run), done=run.is_terminal)
    return render(request, "experiments/run.html", _run_context(run))


def _run_context(run: Run, edit_form: RunEditForm | None = None) -> dict[str, Any]:
    initial = {"name": run.name, "note": run.note, "tags": ", ".join(run.labels)}
    _config, config_yaml, config_problem = stored_config(run.config)
    return {
        "team": run.team,
        "run": run,
        "log": log_tail(run),
        "summary": summarize(run),
        "config_yaml": config_yaml,
        "config_problem": config_problem,
        "params": run.logged.params(),
        "tags": run.logged.tags(),
        "artifacts": stored_artifacts(run),
        "edit_form": edit_form or RunEditForm(initial=initial),
        "place": place_text(run),
        "evaluation": evaluation_summary(run) if run.is_evaluation else None,
        # the lineage's other half: the runs whose weights started from this run's checkpoints
        "started_runs": list(run.started_runs.order_by("pk")),
        "attempts": list(run.attempts.all()),  # docs/resume.md#attempts
        "resume_refusal": resume_refusal(run),
    }


def resume_refusal(run: Run) -> str | None:
    """What the page says of resuming (docs/resume.md): None for a run that is not over or not ours
    (nothing); "" when its checkpoints allow it (the Resume button); otherwise why they do not."""
    if run.status not in RESUMABLE or run.is_external or run.is_evaluation:
        return None
    try:
        resume_step(run)
    except ResumeRefused as refused:
        return refused.why
    return ""


def place_text(run: Run) -> str:
    """ "3rd" for a queued run third in its team's waiting line (docs/sweeps.md#limit), else ""."""
    place = places_in_line(run.team_id).get(run.pk) if run.status == RunStatus.QUEUED else None
    return ordinal(place) if place else ""


@login_required
@require_POST
def run_edit(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """Rename the run, write its note, set its tags."""
    run = get_run_for_user(request, team_slug, pk, write=True)
    form = RunEditForm(request.POST)
    if not form.is_valid():
        return render(request, "experiments/run.html", _run_context(run, form), status=400)
    run.set_details(
        name=form.cleaned_data["name"], note=form.cleaned_data["note"], labels=form.cleaned_data["tags"]
    )
    messages.success(request, "Saved.")
    return redirect("run", team_slug=team_slug, pk=run.pk)


@login_required
@require_POST
def run_retention(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    """Set the run's retention policy; what it drops of the stored trajectories goes in the background."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    form = RetentionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Retention not changed: " + "; ".join(labelled_errors(form)))
        return redirect("run", team_slug=team_slug, pk=run.pk)
    policy = form.retention_policy()
    change_retention(run, policy)
    messages.success(
        request,
        f"This run now keeps {policy.describe()}. What the policy drops of the stored trajectories is being "
        "deleted and its space reclaimed; it does not bring back what an earlier policy dropped.",
    )
    return redirect("run", team_slug=team_slug, pk=run.pk)


@login_required
def run_resume(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """GET: the step it would continue from, or why it cannot; POST: resume it (docs/resume.md)."""
    run = get_run_for_user(request, team_slug, pk, write=True)
    if request.method != "POST":
        try:
            step, refusal = resume_step(run), ""
        except ResumeRefused as exc:
            step, refusal = None, str(exc)
        context = {"team": run.team, "run": run, "step": step, "refusal": refusal}
        return render(request, "results/run_resume.html", context)
    try:
        resumed = resume(run, request.user)
    except ResumeRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Resumed as attempt {resumed.attempt}: it continues from its checkpoint of step {resumed.step}.",
        )
    return redirect("run", team_slug=team_slug, pk=run.pk)
