"""REST access to sweeps: create (expand and launch the grid), list, read, cancel. Personal API token,
the same rules as webapp.experiments.api: outside the caller's teams 404, writes need the member role."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from webapp.accounts.access import get_team_for_user, team_objects
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, Page, PageParams, StrictSchema, newest_first
from webapp.experiments import sweeps
from webapp.experiments.access import get_sweep_for_user
from webapp.experiments.api import RunOut
from webapp.experiments.models import Sweep
from webapp.experiments.waiting_line import places_in_line

router = Router(auth=UserTokenAuth(), tags=["sweeps"])


class SweepCreate(StrictSchema, sweeps.SweepSpec):
    pass


class SweepCellOut(Schema):
    experiment_id: int
    name: str
    preset: str
    task: str
    params: dict[str, Any] = Field(description="The cell's hyperparameter values, by RunConfig path.")
    runs: list[RunOut]


class SweepOut(Schema):
    id: int
    name: str
    status: str = Field(description="From its runs: queued, running, succeeded, failed or cancelled.")
    created: datetime
    spec: dict[str, Any] = Field(description="The grid as sent.")


class SweepDetailOut(SweepOut):
    cells: list[SweepCellOut]
    queued_places: dict[int, int] = Field(description="Run id → its place in the team's waiting line.")


def _detail(sweep: Sweep) -> dict[str, Any]:
    cells = [
        {
            "experiment_id": e.pk,
            "name": e.name,
            "preset": e.preset,
            "task": e.task,
            "params": (e.cell or {}).get("params", {}),
            "runs": list(e.runs.order_by("seed", "pk")),
        }
        for e in sweep.cells.order_by("pk")
    ]
    run_ids = {run.pk for cell in cells for run in cell["runs"]}
    places = {pk: place for pk, place in places_in_line(sweep.team_id).items() if pk in run_ids}
    return {
        "id": sweep.pk,
        "name": sweep.name,
        "status": sweep.status,
        "created": sweep.created,
        "spec": sweep.spec,
        "cells": cells,
        "queued_places": places,
    }


@router.get("/{team_slug}/sweeps", response=Page[SweepOut], summary="The team's sweeps")
def sweep_list(request: HttpRequest, team_slug: str, paging: Query[PageParams]) -> dict[str, Any]:
    return newest_first(team_objects(request, team_slug, Sweep), paging)


@router.post("/{team_slug}/sweeps", response={201: SweepDetailOut}, summary="Create and launch a sweep")
def create_sweep(request: HttpRequest, team_slug: str, body: SweepCreate) -> Any:
    """Every cell of the grid (presets x tasks x hyperparameter values) becomes an experiment with one
    run per seed, launched at once; the team's limit on active runs starts them in turn. A grid over
    64 runs, or with a cell that could never run, is refused whole (400/422, the cell named in the
    message); a name the team already uses is a 409."""
    team = get_team_for_user(request, team_slug, role="member")
    spec = sweeps.SweepSpec.model_validate(body.model_dump())
    try:
        sweep = sweeps.create_sweep(team, request.user, spec)
    except sweeps.SweepRefused as refused:
        raise FieldError(refused.problems, status=refused.status) from None
    return Status(201, _detail(sweep))


@router.get("/{team_slug}/sweeps/{int:pk}", response=SweepDetailOut, summary="One sweep, its cells and runs")
def sweep_detail(request: HttpRequest, team_slug: str, pk: int) -> dict[str, Any]:
    return _detail(get_sweep_for_user(request, team_slug, pk))


@router.post("/{team_slug}/sweeps/{int:pk}/cancel", response=SweepDetailOut, summary="Cancel a sweep")
def cancel_sweep(request: HttpRequest, team_slug: str, pk: int) -> dict[str, Any]:
    """Every active run of the sweep: queued ones are cancelled at once, running ones asked to stop;
    each ends "cancelled by <you>"."""
    sweep = get_sweep_for_user(request, team_slug, pk, write=True)
    sweeps.cancel_sweep(sweep, request.user)
    return _detail(sweep)
