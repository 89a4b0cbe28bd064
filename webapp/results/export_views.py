"""The export pages (docs/checkpoints.md#export): the run page's Export button starts the job, whose
page follows the worker and then offers the folder as a zip."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.experiments.access import get_job_for_user, get_run_for_user
from webapp.experiments.job_pages import start_and_follow
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.results import model_export
from webapp.results.checkpoints import folder_response


@login_required
@require_POST
def export_start(request: HtmxHttpRequest, team_slug: str, run_id: int, step: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id, write=True)
    merge_lora = bool(request.POST.get("merge_lora"))
    return start_and_follow(
        request,
        lambda: model_export.start(run, step, request.user, merge_lora=merge_lora),
        "export_job",
        back=redirect("run", team_slug=run.team.slug, pk=run.pk),
    )


@login_required
def export_job(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """An export's progress, polled until its folder is written (then its download) or it failed."""
    job = get_job_for_user(request, team_slug, pk, model_export.EXPORT_JOB)
    context = {
        "team": job.team,
        "job": job,
        "run": job.run,
        "ready": model_export.export_folder(job) is not None,
    }
    if swaps(request, "export-job"):
        return render_poll(request, "results/export_job.html#job", context, done=job.is_finished)
    return render(request, "results/export_job.html", context)


@login_required
def export_download(request: HtmxHttpRequest, team_slug: str, pk: int) -> StreamingHttpResponse:
    job = get_job_for_user(request, team_slug, pk, model_export.EXPORT_JOB)
    folder = model_export.export_folder(job)
    if folder is None:
        raise Http404("the export has no folder to download")
    return folder_response(folder, folder.name)
