"""The import pages (docs/imports.md#as-a-job): the upload form, which hands the files to a job, and
the job's page, which follows a worker storing them to the run it makes."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.experiments.access import get_job_for_user
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.results import import_jobs
from webapp.results.forms import ImportForm


@login_required
def import_run(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    """Upload a run trained elsewhere (Agent-R1 or verl dumps): its job's page follows a worker
    reading and storing it into an external run (docs/imports.md#as-a-job)."""
    team = get_team_for_user(request, team_slug)
    if request.method != "POST":
        return render(request, "results/import.html", {"team": team, "form": ImportForm()})
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form, status = ImportForm(), 400
    try:
        import_jobs.check_before_upload(request)  # before the body is read: no upload for a refusal
        import_jobs.uploaded_files(request)
        form = ImportForm(request.POST, request.FILES)
        if form.is_valid():
            data = form.cleaned_data
            upload = import_jobs.ImportRequest(
                team, request.user, data["experiment"], data["name"], data["dump"], data["metrics"]
            )
            job = import_jobs.start_import(upload)
            return redirect("import_job", team_slug=team.slug, pk=job.pk)
    except import_jobs.ImportRefused as refused:
        messages.error(request, str(refused))
        status = refused.status
    return render(request, "results/import.html", {"team": team, "form": form}, status=status)


@login_required
def import_job(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """An import's progress, polled until it is done (then the run's link) or failed (the reason)."""
    job = get_job_for_user(request, team_slug, pk, import_jobs.IMPORT_JOB)
    context = {"team": job.team, "job": job}
    if swaps(request, "import-job"):
        return render_poll(request, "results/import_job.html#job", context, done=job.is_finished)
    return render(request, "results/import_job.html", context)
