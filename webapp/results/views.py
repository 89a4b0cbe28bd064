"""HTML pages of the results app. Each: access helper → parse the query → one model/query call →
render. Fragments are named partials of the page template, picked when htmx asks."""

from __future__ import annotations

import csv
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from trainer.contract import INT4_MAX
from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.experiments.access import get_experiment_for_user, get_run_for_user, get_runs_for_user
from webapp.experiments.models import ACTIVE, TERMINAL, Experiment, Run, RunStatus
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.ingestion import metrics_store
from webapp.ingestion.models import MetricLatest
from webapp.results import analytics, export, lineage, onboarding, run_compare, runs_page, workspace
from webapp.results.forms import RunsActionForm
from webapp.results.resume import resume_markers
from webapp.results.runs_columns import default_column_ids
from webapp.rollouts import compare as prompt_compare
from webapp.rollouts import viewer
from webapp.rollouts.questions import user_question

MAX_OVERLAID_RUNS = 12
MAX_CURVE_KEYS = workspace.MAX_PANELS


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
    steps = onboarding.checklist(team)
    context = {
        "team": team,
        "running": runs.filter(status__in=(RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STALLED)),
        "queue": runs.filter(status=RunStatus.QUEUED).order_by("queued_at"),
        "recent": runs.filter(status__in=TERMINAL).order_by("-finished_at")[:10],
        "best": analytics.best_per_task(team),
        "checklist": steps if not all(step.done for step in steps) else None,
        "next_step": onboarding.next_step(steps),
        "first_start": not any(step.done for step in steps[2:]),  # no experiment and no run yet
    }
    return render(request, "results/dashboard.html", context)


@login_required
def dashboard_running(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The running runs' live progress; polled every 2 s until nothing is active."""
    team = get_team_for_user(request, team_slug)
    running = Run.objects.filter(team=team, status__in=ACTIVE).select_related("experiment")
    context = {"team": team, "running": running.exclude(status=RunStatus.QUEUED)}
    return render_poll(request, "results/dashboard.html#running", context, done=not running.exists())


# -- the runs table ---------------------------------------------------------------------------------


def render_runs_table(
    request: HtmxHttpRequest,
    team: Team,
    experiment: Experiment | None,
    template: str,
    context: dict[str, Any],
) -> HttpResponse:
    """A page holding the runs table (the team's runs page, an experiment's page). A poll of the
    table (htmx, not boosted) gets the table alone, and stops once no run on it is active. A query
    the table cannot use is a 400 whose page names what to change
    (docs/runs-and-curves.md#the-runs-table); to htmx's boosted form a 200, since htmx swaps no 4xx
    in and the form's error list would never show."""
    page = runs_page.page_for(request.user, team, experiment, request.GET)
    context = {**context, "team": team, "runs": page, "table": page.table}
    if swaps(request, "runs-table") and not request.htmx.boosted:
        return render_poll(request, f"{template}#runs-table", context, done=not page.table.has_active)
    refused = bool(page.table.query.errors) and not request.htmx
    return render(request, template, context, status=400 if refused else 200)


@login_required
def runs(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    return render_runs_table(request, team, None, "results/runs.html", {})


def _next_url(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return fallback


def _scope(request: HttpRequest, team_slug: str) -> Experiment | None:
    """The experiment a runs-table form names (``experiment``), or None for the team's table."""
    pk = request.POST.get("experiment") or request.GET.get("experiment") or ""
    return get_experiment_for_user(request, team_slug, int(pk)) if pk.isdigit() else None


@login_required
@require_POST
def runs_columns(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Save the user's columns for the team's table or one experiment's."""
    team = get_team_for_user(request, team_slug)
    experiment = _scope(request, team_slug)
    ids = request.POST.getlist("col")
    added = request.POST.get("add_key", "").strip()
    if added:
        ids.append(f"{request.POST.get('add_kind', 'last')}:{added}")
    if request.POST.get("reset"):
        ids = default_column_ids(experiment.task if experiment else None)
    for problem in runs_page.save_column_ids(request.user, team, experiment, ids):
        messages.error(request, f"Column not added: {problem}")
    saved = runs_page.saved_column_ids(request.user, team, experiment) or []
    return redirect(runs_page.with_columns(_next_url(request, reverse("runs", args=[team.slug])), saved))


@login_required
@require_POST
def runs_action(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The toolbar of the runs table: open the selected runs' curves or configs, or change them."""
    team = get_team_for_user(request, team_slug)
    back = _next_url(request, reverse("runs", args=[team.slug]))
    form = RunsActionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(str(error) for error in errors))
        return redirect(back)
    action, ids = form.cleaned_data["action"], form.cleaned_data["runs"]
    query = "&".join(f"run={pk}" for pk in ids)
    if action == "overlay":
        return redirect(f"{reverse('curves', args=[team.slug])}?{query}")
    if action == "compare":
        return redirect(f"{reverse('runs_compare', args=[team.slug])}?{query}")
    if action == "delete":
        return redirect(
            f"{reverse('runs_delete', args=[team.slug])}?{urlencode({'run': ids, 'next': back}, doseq=True)}"
        )
    get_team_for_user(request, team_slug, role=Role.MEMBER)
    chosen = Run.objects.filter(team=team, pk__in=ids)
    tag = form.cleaned_data["tag"]
    changed = {
        "archive": lambda: chosen.archive(),
        "restore": lambda: chosen.restore(),
        "tag": lambda: chosen.add_label(tag),
        "untag": lambda: chosen.remove_label(tag),
    }[action]()
    messages.success(
        request, RUN_ACTION_DONE[action].format(n=changed, tag=tag, s="" if changed == 1 else "s")
    )
    return redirect(back)


RUN_ACTION_DONE = {
    "archive": "Archived {n} run{s}.",
    "restore": "Restored {n} run{s}.",
    "tag": "Tagged {n} run{s} {tag}.",
    "untag": "Removed the tag {tag} from {n} run{s}.",
}


@login_required
def runs_delete(request: HttpRequest, team_slug: str) -> HttpResponse:
    """GET: which runs would go, and a button; POST: delete them (never an active run)."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    ids = _int_list(request.POST.getlist("run") if request.method == "POST" else request.GET.getlist("run"))
    chosen = Run.objects.filter(team=team, pk__in=ids).select_related("experiment")
    back = _next_url(request, reverse("runs", args=[team.slug]))
    if request.method == "POST":
        deleted, active = chosen.delete_finished()
        messages.success(request, f"Deleted {deleted} run{'' if deleted == 1 else 's'}.")
        if active:
            messages.error(
                request, f"{active} active run{'' if active == 1 else 's'} kept: cancel first, then delete."
            )
        return redirect(back)
    context = {
        "team": team,
        "chosen": chosen,
        "active": [r for r in chosen if r.status in ACTIVE],
        "deletable": sum(r.status not in ACTIVE for r in chosen),
        "next": back,
    }
    return render(request, "results/runs_delete.html", context)


@login_required
def runs_compare(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Two to eight runs side by side (docs/runs-and-curves.md#compare-runs); more is refused."""
    team = get_team_for_user(request, team_slug)
    ids = list(dict.fromkeys(_int_list(request.GET.getlist("run"))))
    chosen = get_runs_for_user(request, team_slug, ids[: run_compare.MAX_RUNS])
    context: dict[str, Any] = {"team": team, "chosen": chosen, "max_runs": run_compare.MAX_RUNS}
    try:
        run_compare.check_count(len(ids))
    except run_compare.CompareRefused as refused:
        context["refused"] = str(refused)
        too_many = len(ids) > run_compare.MAX_RUNS
        return render(request, "results/runs_compare.html", context, status=400 if too_many else 200)
    baseline = _optional_int(request.GET.get("baseline"))
    only_different = request.GET.get("all") != "1"
    index = ids.index(baseline) if baseline in ids else 0
    context |= {
        "comparison": run_compare.compare(chosen, index, only_different),
        "only_different": only_different,
        "query": "&".join(f"run={pk}" for pk in ids),
        "curve_keys": _curve_keys(chosen),
        "shared_rows": prompt_compare.shared_rows(chosen),
    }
    return render(request, "results/runs_compare.html", context)


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
    """The workspace of any chosen runs (a selection in the runs table); the layout is the team's."""
    team = get_team_for_user(request, team_slug)
    chosen = [get_run_for_user(request, team_slug, pk) for pk in _int_list(request.GET.getlist("run"))]
    return _workspace_page(request, team, None, chosen[:MAX_OVERLAID_RUNS])


@login_required
def experiment_curves(request: HttpRequest, team_slug: str, experiment_id: int) -> HttpResponse:
    """An experiment's workspace: its newest runs, seeds drawn as one group unless split."""
    experiment = get_experiment_for_user(request, team_slug, experiment_id)
    ids = _int_list(request.GET.getlist("run"))
    runs = experiment.runs.filter(archived_at__isnull=True).select_related("experiment")
    chosen = list((runs.filter(pk__in=ids) if ids else runs).order_by("-created")[:MAX_OVERLAID_RUNS])
    return _workspace_page(request, experiment.team, experiment, chosen, groups_by_default=True)


@login_required
def run_curves(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    return _workspace_page(request, run.team, run.experiment, [run])


def _workspace_page(
    request: HttpRequest,
    team: Team,
    experiment: Experiment | None,
    chosen: list[Run],
    *,
    groups_by_default: bool = False,
) -> HttpResponse:
    logged = _logged_keys(chosen)
    panels, is_default = _panels(request, team, experiment, chosen, logged)
    grouped = request.GET.get("groups", "1" if groups_by_default else "0") == "1"
    context = {
        "team": team,
        "experiment": experiment,
        "chosen": chosen,
        "chosen_ids": [run.pk for run in chosen],
        "colors": {run.pk: index for index, run in enumerate(chosen)},
        "recent": Run.objects.filter(team=team).select_related("experiment").order_by("-created")[:50],
        "logged": logged,
        "addable": [key for key in logged if key not in {panel.key for panel in panels}],
        "panels": panels,
        "is_default": is_default,
        "grouped": grouped,
        "lineage": request.GET.get("lineage") == "1",
        "has_forks": any(run.started_from_id for run in chosen),
        "x_axis": request.GET.get("x", "step"),
        "smoothing": request.GET.get("smoothing", "0.6"),
    }
    return render(request, "results/curves.html", context)


def _curve_keys(chosen: list[Run]) -> list[str]:
    """The keys of the default workspace the runs logged: the compare page overlays one at a time."""
    logged = _logged_keys(chosen)
    return [
        key
        for key in workspace.default_keys([run.experiment.task for run in chosen], logged)
        if key in logged
    ]


def _logged_keys(chosen: list[Run]) -> list[str]:
    return sorted(set(MetricLatest.objects.filter(run__in=chosen).values_list("key__name", flat=True)))


def _panels(
    request: HttpRequest, team: Team, experiment: Experiment | None, chosen: list[Run], logged: list[str]
) -> tuple[list[workspace.Panel], bool]:
    tasks = [run.experiment.task for run in chosen]
    return workspace.panels_for(request.user, team, experiment, tasks, logged)


@login_required
@require_POST
def curves_layout(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Add, remove or log-scale a panel of the user's workspace (per experiment, or the team's)."""
    team = get_team_for_user(request, team_slug)
    experiment = _scope(request, team_slug)
    action, key = request.POST.get("action", ""), request.POST.get("key", "").strip()
    if action not in workspace.ACTIONS or (action != "reset" and not key):
        messages.error(request, "Choose a metric for the panel.")
    elif action == "reset":
        workspace.reset(request.user, team, experiment)
    else:
        # The page's runs decide the default layout it showed, until the user first changes it.
        ids = _int_list(request.POST.getlist("run"))[:MAX_OVERLAID_RUNS]
        chosen = [get_run_for_user(request, team_slug, pk) for pk in ids]
        panels, _default = _panels(request, team, experiment, chosen, _logged_keys(chosen))
        workspace.save(request.user, team, experiment, workspace.changed(panels, action, key))
    if request.headers.get("Accept") == "application/json":  # the page's script: no reload
        return JsonResponse({"saved": True})
    return redirect(_next_url(request, reverse("curves", args=[team.slug])))


def _chosen_for_data(
    request: HttpRequest, team_slug: str
) -> tuple[list[Run], list[str], int | None, int | None]:
    chosen = [get_run_for_user(request, team_slug, pk) for pk in _int_list(request.GET.getlist("run"))]
    keys = request.GET.getlist("key")[:MAX_CURVE_KEYS]
    lo, hi = _optional_int(request.GET.get("lo")), _optional_int(request.GET.get("hi"))
    return chosen[:MAX_OVERLAID_RUNS], keys, lo, hi


@login_required
def curves_data(request: HttpRequest, team_slug: str) -> JsonResponse:
    """Downsampled series of the chosen runs and keys (the charts' one JSON endpoint); ``lo`` and
    ``hi`` narrow it to a zoomed step range, read from the raw points once the range is short."""
    get_team_for_user(request, team_slug)
    chosen, keys, lo, hi = _chosen_for_data(request, team_slug)
    if (
        request.GET.get("lineage") == "1"
    ):  # forks continue their parents' curves (docs/checkpoints.md#lineage)
        drawn = frozenset(run.pk for run in chosen)
        series = [lineage.continued_series(run, key, lo, hi, drawn) for run in chosen for key in keys]
    else:
        series = [metrics_store.downsample(run.pk, key, lo, hi).as_dict() for run in chosen for key in keys]
    groups: dict[int, list[int]] = {}
    for run in chosen:
        groups.setdefault(run.experiment_id, []).append(run.pk)
    runs = {
        run.pk: {
            "name": str(run),
            "status": run.status,
            "live": run.status in ACTIVE,
            "group": run.experiment_id,
            "samples_per_step": analytics.samples_per_step(run),
            "rollouts_url": reverse("rollouts_at", args=[team_slug, run.pk, 0]).removesuffix("0/"),
            "resumed_from": resume_markers(run),  # docs/resume.md#the-curve
            "forked_from": lineage.fork_origin(run),  # docs/checkpoints.md#lineage
        }
        for run in chosen
    }
    # Seeds of one experiment form a group (mean and min-max band) when the page asks for groups.
    group_names = {run.experiment_id: run.experiment.name for run in chosen}
    payload = {
        "order": [run.pk for run in chosen],
        "runs": runs,
        "groups": [{"id": g, "name": group_names[g], "runs": ids} for g, ids in groups.items()],
        "series": series,
        "range": {"lo": lo, "hi": hi},
        "live": any(r["live"] for r in runs.values()),
    }
    return JsonResponse(payload)


MAX_CSV_POINTS = 100_000


@login_required
def curves_csv(request: HttpRequest, team_slug: str) -> HttpResponse:
    """One panel's data, every raw point of each run in the (zoomed) step range."""
    get_team_for_user(request, team_slug)
    chosen, keys, lo, hi = _chosen_for_data(request, team_slug)
    if len(keys) != 1:
        raise Http404("one key per CSV")
    key = keys[0]
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{_safe_name(key)}.csv"'
    writer = csv.writer(response)
    writer.writerow(["run_id", "run", "key", "step", "value", "ts"])
    for run in chosen:
        points = metrics_store.raw_points(
            run.pk, key, lo or 0, INT4_MAX if hi is None else hi, MAX_CSV_POINTS
        )
        # Run names and keys are the members' text: no spreadsheet may run them (export.csv_cell).
        name, shown_key = export.csv_cell(str(run)), export.csv_cell(key)
        writer.writerows([run.pk, name, shown_key, step, value, ts] for step, value, ts in points)
    return response


def _safe_name(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key) or "metric"


# -- analytics ------------------------------------------------------------------------------------------


@login_required
def tools(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    return render(
        request, "results/tools.html", {"team": run.team, "run": run, "stats": analytics.tool_stats(run)}
    )


VERDICTS = analytics.VERDICTS


@login_required
def prompts(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    curves_ = analytics.prompt_curves(run)
    verdict = request.GET.get("verdict", "")
    counts = {v: sum(c.verdict == v for c in curves_) for v in VERDICTS}
    shown = [c for c in curves_ if not verdict or c.verdict == verdict]
    page = Paginator(shown, 100).get_page(request.GET.get("page"))
    prompts_ = viewer.first_prompts(run, [c.sample_index for c in page.object_list])
    rows = [(c, user_question(prompts_.get(c.sample_index, ""))) for c in page.object_list]
    context = {
        "team": run.team,
        "run": run,
        "counts": counts,
        "verdict": verdict,
        "page": page,
        "rows": rows,
        "min_samples": analytics.MIN_SAMPLES_FOR_UNSTABLE,
    }
    return render(request, "results/prompts.html", context)
