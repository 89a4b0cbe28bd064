"""The team's waiting line: its queued runs that the team's limit on active runs holds back
(TeamRunLimit, docs/sweeps.md), and how many of its runs have started."""

from __future__ import annotations

from django.db import models

from webapp.experiments.executors import limited_executors
from webapp.experiments.lifecycle import STARTED, RunStatus
from webapp.experiments.models import Run


def waiting_line(team_id: int) -> models.QuerySet[Run]:
    """The team's queued runs the limit counts, in the order they start: first queued, first started."""
    queued = Run.objects.filter(team_id=team_id, status=RunStatus.QUEUED, executor__in=limited_executors())
    return queued.order_by("queued_at", "pk")


def started_count(team_id: int) -> int:
    return Run.objects.filter(team_id=team_id, status__in=STARTED, executor__in=limited_executors()).count()


def places_in_line(team_id: int) -> dict[int, int]:
    """Run id → its place in the team's waiting line (1: starts next)."""
    return {pk: place for place, pk in enumerate(waiting_line(team_id).values_list("pk", flat=True), start=1)}
