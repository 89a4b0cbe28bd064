"""The one access helper per object type of this app: a run or experiment outside the user's
teams is a 404."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.experiments.jobs import Job
from webapp.experiments.models import Experiment, Run, Sweep


def get_experiment_for_user(
    request: HttpRequest, team_slug: str, pk: int, *, write: bool = False
) -> Experiment:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Experiment, pk=pk, team=team)


def get_run_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> Run:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Run.objects.select_related("experiment"), pk=pk, team=team)


def get_sweep_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> Sweep:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Sweep, pk=pk, team=team)


def get_job_for_user(request: HttpRequest, team_slug: str, pk: int, kind: str) -> Job:
    """A job of the team (docs/api.md#jobs): whoever may see the team may follow its progress."""
    team = get_team_for_user(request, team_slug)
    return get_object_or_404(Job.objects.select_related("run", "team"), pk=pk, team=team, kind=kind)
