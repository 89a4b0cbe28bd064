"""The one access helper per object type of this app: a run or experiment outside the user's
teams is a 404."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.http import Http404, HttpRequest
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


def get_runs_for_user(request: HttpRequest, team_slug: str, pks: Sequence[int]) -> list[Run]:
    """The runs ``pks``, in that order, read with one membership check and one query; any of them
    outside the team is a 404, as get_run_for_user answers for one."""
    team = get_team_for_user(request, team_slug)
    low, high = connection.ops.integer_field_range(Run._meta.pk.get_internal_type())
    possible = [pk for pk in pks if low <= pk <= high]  # an id no row can have is not sent to Postgres
    found = Run.objects.select_related("experiment").filter(team=team).in_bulk(possible)
    if any(pk not in found for pk in pks):
        raise Http404("No such run")
    return [found[pk] for pk in pks]


def get_sweep_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> Sweep:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Sweep, pk=pk, team=team)


def get_job_for_user(request: HttpRequest, team_slug: str, pk: int, kind: str) -> Job:
    """A job of the team (docs/api.md#jobs): whoever may see the team may follow its progress."""
    team = get_team_for_user(request, team_slug)
    return get_object_or_404(Job.objects.select_related("run", "team"), pk=pk, team=team, kind=kind)
