"""The one access helper for datasets: a dataset outside the user's teams is a 404."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.datasets.models import Dataset


def get_dataset_for_user(request: HttpRequest, team_slug: str, pk: int, *, write: bool = False) -> Dataset:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Dataset.objects.select_related("team"), pk=pk, team=team)
