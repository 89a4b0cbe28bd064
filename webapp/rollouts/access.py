"""The one access helper per object type of this app: a trajectory or a review queue outside the
user's teams (or a trajectory not of the run named in the URL) is a 404; a change needs the member
role (a viewer reads, docs/annotations.md#who-may-do-what)."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.experiments.access import get_run_for_user
from webapp.ingestion.models import Trajectory
from webapp.rollouts.models import ReviewQueue


def get_trajectory_for_user(
    request: HttpRequest, team_slug: str, run_id: int, pk: int, *, write: bool = False
) -> Trajectory:
    run = get_run_for_user(request, team_slug, run_id, write=write)
    return get_object_or_404(
        Trajectory.objects.select_related("run__experiment", "run__team"), pk=pk, run=run
    )


def get_queue_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> ReviewQueue:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(ReviewQueue.objects.select_related("run__team", "team"), pk=pk, team=team)
