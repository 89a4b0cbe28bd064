"""The links the MLflow client prints ("View run at <uri>/#/experiments/E/runs/R") land on our pages.

MLflow's own UI lives under that URI; ours does not, so ``/mlflow/`` serves a page whose script reads
the fragment and asks :func:`open_link` for the run's or experiment's page. Access is the web UI's:
a run outside the user's teams is a 404.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from webapp.experiments.access import get_experiment_for_user, get_run_for_user
from webapp.experiments.models import Experiment, Run


def browse(request: HttpRequest) -> HttpResponse:
    return render(request, "mlflow_api/browse.html")


@login_required
def open_link(request: HttpRequest) -> HttpResponse:
    run_id = request.GET.get("run", "")
    if run_id:
        run = Run.objects.select_related("team").filter(mlflow_run_id=run_id).first()
        if run is None:
            raise Http404("No such run")
        found = get_run_for_user(request, run.team.slug, run.pk)
        return redirect("run", found.team.slug, found.pk)
    experiment_pk = _int(request.GET.get("experiment"))
    experiment = Experiment.objects.select_related("team").filter(pk=experiment_pk or 0).first()
    if experiment is None:
        raise Http404("No such experiment")
    found_experiment = get_experiment_for_user(request, experiment.team.slug, experiment.pk)
    return redirect("experiment", found_experiment.team.slug, found_experiment.pk)


def _int(text: str | None) -> int | None:
    try:
        number = int(text or "")
    except ValueError:
        return None
    return number if 0 < number < 2**63 else None  # a primary key, or nothing
