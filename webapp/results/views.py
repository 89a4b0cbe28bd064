"""HTML pages of the results app. Each: access helper → parse the query → one model/query call →
render. Fragments are named partials of the page template, picked when htmx asks."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from trainer.contract import REWARD_MEAN
from webapp.accounts.access import get_team_for_user
from webapp.experiments.access import get_run_for_user
from webapp.experiments.models import ACTIVE, TERMINAL, Run, RunStatus
from webapp.htmx import render_poll, template_for
from webapp.results import analytics, export, metrics_store
from webapp.results import rollouts as viewer
from webapp.results.access import get_trajectory_for_user
from webapp.results.forms import RolloutFilterForm
from webapp.results.models import MetricLatest, Trajectory

PAGE_SIZE = 50
MAX_OVERLAID_RUNS = 12
MAX_CURVE_KEYS = 16
DEFAULT_KEY = REWARD_MEAN  # verl's critic/score/mean arrives under it too (trainer.contract)


def _int_list(values: list[str]) -> list[int]:
    try:
        return [int(v) for v in values if v]
    except ValueError:
        raise Http404("run ids are numbers") from None


def _optional_int(value: str | None) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)  # type: ignore[arg-type]
    except ValueError:
        raise Http404("not a number") from None


# -- dashboard ------------------------------------------------------------------------------------


@login_required
def dashboard(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    runs = Run.objects.filter(team=team).select_related("experiment")
    context = {
        "team": team,
        "running": runs.filter(status__in=(RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STALLED)),
        "queue": runs.filter(status=RunStatus.QUEUED).order_by("queued_at"),
        "recent": runs.filter(status__in=TERMINAL).order_by("-finished_at")[:10],
        "best": analytics.best_per_task(team),
    }
    return render(request, "results/dashboard.html", context)


@login_required
def dashboard_running(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The running runs' live progress; polled every 2 s until nothing is active."""
    team = get_team_for_user(request, team_slug)
    running = Run.objects.filter(team=team, status__in=ACTIVE).select_related("experiment")
    context = {"team": team, "running": running.exclude(status=RunStatus.QUEUED)}
    return render_poll(request, "results/dashboard.html#running", context, done=not running.exists())


# -- the comparison table ---------------------------------------------------------------------------


@login_required
def index(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    context = {"team": team, "matrix": analytics.comparison(team), "references": analytics.reference_tables()}
    return render(request, "results/index.html", context)


@login_required
def compare_export(request: HttpRequest, team_slug: str, fmt: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    if fmt not in export.FORMATS:
        raise Http404("formats: csv, md, tex")
    render_table, content_type = export.FORMATS[fmt]
    response = HttpResponse(
        render_table(analytics.comparison(team), analytics.reference_tables()), content_type
    )
    response["Content-Disposition"] = f'attachment; filename="{team.slug}-comparison.{fmt}"'
    return response


@login_required
def compare_cell(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    cell = analytics.comparison(team).cell(request.GET.get("task", ""), request.GET.get("algorithm", ""))
    if cell is None:
        raise Http404("no such cell")
    runs = Run.objects.filter(team=team, pk__in=cell.run_ids).select_related("experiment")
    results = {r.run.pk: r for r in analytics.run_results(list(runs))}
    context = {"team": team, "cell": cell, "rows": [(run, results.get(run.pk)) for run in runs]}
    return render(request, "results/compare_cell.html", context)


# -- curves -------------------------------------------------------------------------------------------


@login_required
def curves(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    chosen = [get_run_for_user(request, team_slug, pk) for pk in _int_list(request.GET.getlist("run"))]
    return _curves_page(request, team, chosen[:MAX_OVERLAID_RUNS])


@login_required
def run_curves(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    return _curves_page(request, run.team, [run])


def _curves_page(request: HttpRequest, team: Any, chosen: list[Run]) -> HttpResponse:
    latest = MetricLatest.objects.filter(run__in=chosen).select_related("key")
    keys = sorted({row.key.name for row in latest})
    default = [DEFAULT_KEY] if DEFAULT_KEY in keys else keys[:1]
    selected = [k for k in request.GET.getlist("key") if k in keys] or default
    context = {
        "team": team,
        "chosen": chosen,
        "chosen_ids": [run.pk for run in chosen],
        "runs": Run.objects.filter(team=team).select_related("experiment").order_by("-created")[:50],
        "keys": keys,
        "selected": selected[:MAX_CURVE_KEYS],
        "latest": latest,
        "x_axis": request.GET.get("x", "step"),
        "smoothing": request.GET.get("smoothing", "0.6"),
    }
    return render(request, "results/curves.html", context)


@login_required
def curves_data(request: HttpRequest, team_slug: str) -> JsonResponse:
    """Downsampled series of the chosen runs and keys (the chart's one JSON endpoint)."""
    get_team_for_user(request, team_slug)
    chosen = [get_run_for_user(request, team_slug, pk) for pk in _int_list(request.GET.getlist("run"))]
    keys = request.GET.getlist("key")[:MAX_CURVE_KEYS]
    lo, hi = _optional_int(request.GET.get("lo")), _optional_int(request.GET.get("hi"))
    series = [
        metrics_store.downsample(run.pk, key, lo, hi).as_dict()
        for run in chosen[:MAX_OVERLAID_RUNS]
        for key in keys
    ]
    runs = {
        run.pk: {
            "name": str(run),
            "status": run.status,
            "live": run.status in ACTIVE,
            "samples_per_step": analytics.samples_per_step(run),
            "rollouts_url": reverse("rollouts_at", args=[team_slug, run.pk, 0]).removesuffix("0/"),
        }
        for run in chosen
    }
    return JsonResponse({"runs": runs, "series": series, "live": any(r["live"] for r in runs.values())})


# -- rollouts -----------------------------------------------------------------------------------------


@login_required
def rollouts(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    form = RolloutFilterForm(request.GET or None, data_sources=viewer.data_sources(run))
    chosen = form.to_filter().apply(Trajectory.objects.filter(run=run))
    page = Paginator(
        chosen.order_by("-training_step", "group_id", "rollout_index", "id"), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"team": run.team, "run": run, "form": form, "page": page, "query": query.urlencode()}
    return render(
        request, template_for(request, "results/rollouts.html", {"rollout-table": "table"}), context
    )


@login_required
def rollouts_at(request: HttpRequest, team_slug: str, run_id: int, step: int) -> HttpResponse:
    """A click on a curve point: the rollouts of that training step, or of the nearest one logged."""
    run = get_run_for_user(request, team_slug, run_id)
    nearest = viewer.nearest_step_with_rollouts(run, step)
    target = reverse("rollouts", args=[team_slug, run.pk])
    return redirect(f"{target}?step={nearest}" if nearest is not None else target)


@login_required
def trajectory(request: HttpRequest, team_slug: str, run_id: int, pk: int) -> HttpResponse:
    found = get_trajectory_for_user(request, team_slug, run_id, pk)
    siblings = Trajectory.objects.filter(run=found.run, group_id=found.group_id).exclude(pk=found.pk)
    context = {
        "team": found.run.team,
        "run": found.run,
        "trajectory": found,
        "steps": viewer.step_views(found),
        "siblings": siblings.order_by("rollout_index")[:16],
    }
    return render(request, "results/trajectory.html", context)


@login_required
def group(request: HttpRequest, team_slug: str, run_id: int, group_id: str) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    members, all_equal = viewer.group_members(run, group_id)
    if not members:
        raise Http404("no such group")
    context = {"team": run.team, "run": run, "group_id": group_id, "members": members, "all_equal": all_equal}
    return render(request, "results/group.html", context)


# -- analytics ------------------------------------------------------------------------------------------


@login_required
def tools(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    return render(
        request, "results/tools.html", {"team": run.team, "run": run, "stats": analytics.tool_stats(run)}
    )


VERDICTS = ("never solved", "learned", "regressed", "unstable", "solved from the start")


@login_required
def prompts(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    curves_ = analytics.prompt_curves(run)
    verdict = request.GET.get("verdict", "")
    counts = {v: sum(c.verdict == v for c in curves_) for v in VERDICTS}
    shown = [c for c in curves_ if not verdict or c.verdict == verdict]
    page = Paginator(shown, 100).get_page(request.GET.get("page"))
    context = {"team": run.team, "run": run, "counts": counts, "verdict": verdict, "page": page}
    return render(request, "results/prompts.html", context)
