"""The one access helper for trajectories: one outside the user's teams (or not of the run named in
the URL) is a 404."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from webapp.experiments.access import get_run_for_user
from webapp.ingestion.models import Trajectory


def get_trajectory_for_user(request: HttpRequest, team_slug: str, run_id: int, pk: int) -> Trajectory:
    run = get_run_for_user(request, team_slug, run_id)
    return get_object_or_404(Trajectory.objects.select_related("run__experiment"), pk=pk, run=run)
