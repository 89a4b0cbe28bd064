"""A sweep's page (docs/sweeps.md): its grid, a row per cell with each seed's latest and best reward
and validation accuracy, and the task x algorithm comparison of its runs; polled while they run."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from webapp.experiments.access import get_sweep_for_user
from webapp.experiments.models import Experiment, Run, Sweep
from webapp.experiments.sweeps import ordinal
from webapp.experiments.waiting_line import places_in_line
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.results import analytics
from webapp.results.summary import summarize


@dataclass
class RunCell:
    run: Run
    place: int | None  # in the team's waiting line, when queued
    reward_latest: float | None
    reward_best: float | None
    val_latest: float | None

    @property
    def place_text(self) -> str:
        return ordinal(self.place) if self.place else ""


@dataclass
class GridRow:
    experiment: Experiment
    runs: list[RunCell]


def grid(sweep: Sweep) -> list[GridRow]:
    places = places_in_line(sweep.team_id)
    rows = []
    for experiment in sweep.cells.order_by("pk"):
        runs = []
        for run in experiment.runs.order_by("seed", "pk"):
            summary = summarize(run)
            validation = summary.validation.latest if summary.validation else None
            runs.append(
                RunCell(run, places.get(run.pk), summary.reward.latest, summary.reward.best, validation)
            )
        rows.append(GridRow(experiment, runs))
    return rows


@login_required
def sweep_detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    sweep = get_sweep_for_user(request, team_slug, pk)
    rows = grid(sweep)
    runs = [cell.run for row in rows for cell in row.runs]
    context = {
        "team": sweep.team,
        "sweep": sweep,
        "status": sweep.status,
        "rows": rows,
        "params": [axis["path"] for axis in sweep.spec.get("params", [])],
        "matrix": analytics.comparison(sweep.team, runs=runs),
        "active": any(not run.is_terminal for run in runs),
    }
    if swaps(request, "grid"):
        return render_poll(request, "experiments/sweep.html#grid", context, done=not context["active"])
    return render(request, "experiments/sweep.html", context)
