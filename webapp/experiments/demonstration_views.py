"""The Generate demonstrations pages (docs/demonstrations.md): the dataset page's form starts the job
and this job's page follows it to the new dataset, with what was kept and dropped."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.datasets.access import get_dataset_for_user
from webapp.datasets.demonstrations import DemonstrationsRefused, recipe_tools
from webapp.datasets.models import Dataset
from webapp.experiments import demonstrations
from webapp.experiments.access import get_job_for_user
from webapp.experiments.job_pages import start_and_follow
from webapp.htmx import HtmxHttpRequest, render_poll, swaps

TOOL_FIELD = "tool_"  # the form's field per recipe tool: tool_<recipe tool> = the tool that runs it


@login_required
@require_POST
def generate(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """Start generating demonstrations of the dataset; its job's page follows the worker."""
    dataset = get_dataset_for_user(request, team_slug, pk, write=True)
    tool_map = {tool: request.POST.get(TOOL_FIELD + tool) or tool for tool in recipe_tools(dataset)}
    return start_and_follow(
        request,
        lambda: demonstrations.start(dataset, request.user, tool_map),
        "demonstrations_job",
        back=redirect("dataset", team_slug=dataset.team.slug, pk=dataset.pk),
        refused=(DemonstrationsRefused,),
    )


@login_required
def job(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """A generation's progress, polled until it is done (the new dataset, the counts) or failed."""
    job = get_job_for_user(request, team_slug, pk, demonstrations.DEMONSTRATIONS_JOB)
    made, source = job.result.get("dataset"), job.options.get("dataset")
    context = {
        "team": job.team,
        "job": job,
        "source": Dataset.objects.filter(pk=source, team=job.team).first() if source else None,
        "dataset": Dataset.objects.filter(pk=made, team=job.team).first() if made else None,
        "dropped": sorted((job.result.get("dropped") or {}).items()),
        "examples": job.result.get("examples") or {},
    }
    if swaps(request, "demonstrations-job"):
        return render_poll(request, "datasets/demonstrations_job.html#job", context, done=job.is_finished)
    return render(request, "datasets/demonstrations_job.html", context)
