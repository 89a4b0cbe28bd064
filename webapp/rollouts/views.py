"""Pages of the rollout viewer (docs/rollouts.md): a run's rollouts filtered, one trajectory step by
step, the n rollouts of one prompt, search over stored steps, and one prompt at two training steps.
Each: access helper → parse the query → one query → render."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache

from trainer.contract import INT4_MAX
from webapp.accounts.access import get_team_for_user
from webapp.experiments.access import get_run_for_user
from webapp.experiments.models import Run
from webapp.htmx import template_for
from webapp.ingestion.models import Trajectory
from webapp.rollouts import compare, histograms, labelling, review_views, viewer
from webapp.rollouts.access import get_trajectory_for_user
from webapp.rollouts.forms import HistogramForm, PromptCompareForm, RolloutFilterForm, SearchForm
from webapp.rollouts.questions import user_question
from webapp.rollouts.review_forms import PromoteForm, QueueForm
from webapp.rollouts.search import SEARCH_RESULTS, search_hits

PAGE_SIZE = 50


@login_required
@never_cache  # not kept for the Back button: labels given since must show (docs/annotations.md#in-the-rollout-list)
def rollouts(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    labels = labelling.team_labels(run.team)
    form = RolloutFilterForm(
        request.GET or None, data_sources=viewer.data_sources(run), labels=[label.name for label in labels]
    )
    chosen = form.to_filter().apply(Trajectory.objects.filter(run=run))
    page = Paginator(
        chosen.order_by("-training_step", "group_id", "rollout_index", "id"), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    page.object_list = list(page.object_list)
    labels_of = labelling.labels_by_trajectory(t.pk for t in page.object_list)
    for shown in page.object_list:
        shown.review_labels = labels_of.get(shown.pk, [])  # type: ignore[attr-defined]  # the Labels column
    context = {
        "team": run.team,
        "run": run,
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "can_write": review_views.may_write(request, team_slug),
        "queue_form": QueueForm(members=review_views.team_members(run.team)),
        "promote_form": PromoteForm(),
    }
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
    steps = viewer.step_views(found)
    context = {
        "team": found.run.team,
        "run": found.run,
        "trajectory": found,
        "steps": steps,
        "siblings": siblings.order_by("rollout_index")[:16],
        **review_views.review_context(request, found, steps),
    }
    return render(request, "results/trajectory.html", context)


@login_required
def group(request: HttpRequest, team_slug: str, run_id: int, group_id: str) -> HttpResponse:
    run = get_run_for_user(request, team_slug, run_id)
    members, all_equal = viewer.group_members(run, group_id)
    if not members:
        raise Http404("no such group")
    first = members[0].trajectory
    context = {
        "team": run.team,
        "run": run,
        "group_id": group_id,
        "members": members,
        "all_equal": all_equal,
        "prompt": viewer.group_prompt(members),
        "ground_truth": first.ground_truth,
        "first": first,
    }
    return render(request, "results/group.html", context)


@login_required
def search(request: HttpRequest, team_slug: str) -> HttpResponse:
    """Full-text search over the team's stored steps (or one run's), within the rollout filters."""
    team = get_team_for_user(request, team_slug)
    run_id = request.GET.get("run", "")
    run = (
        get_run_for_user(request, team_slug, int(run_id))
        if run_id.isdigit() and int(run_id) <= INT4_MAX
        else None
    )
    form = SearchForm(
        request.GET if "q" in request.GET else None,
        data_sources=viewer.data_sources(run) if run else [],
        labels=[label.name for label in labelling.team_labels(team)],
        initial={"run": run.pk if run else None},
    )
    hits = None
    if form.is_valid():
        runs = [run.pk] if run else list(Run.objects.filter(team=team).values_list("pk", flat=True))
        hits = search_hits(runs, form.to_filter(), form.cleaned_data["q"])
    context = {
        "team": team,
        "run": run,
        "form": form,
        "hits": hits,
        "limit": SEARCH_RESULTS,
        "can_write": review_views.may_write(request, team_slug),
        "queue_form": QueueForm(members=review_views.team_members(team)),
    }
    return render(request, "results/search.html", context)


@login_required
def prompt_compare(request: HttpRequest, team_slug: str, run_id: int, sample: int) -> HttpResponse:
    """One dataset row's rollouts at two training steps (or in two runs) side by side."""
    run = get_run_for_user(request, team_slug, run_id)
    form = PromptCompareForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    other = get_run_for_user(request, team_slug, data["run_b"]) if data.get("run_b") else run
    steps, other_steps = compare.steps_of_prompt(run, sample), compare.steps_of_prompt(other, sample)
    if not steps or not other_steps:
        raise Http404("no rollouts of this dataset row")
    if other == run and len(steps) < 2:
        raise Http404("this dataset row was sampled at one training step: there is nothing to compare")
    a, b = compare.two_steps(steps, other_steps, data.get("a"), data.get("b"), same_run=other == run)
    rollout_index: int = data.get("rollout") or 0
    before = compare.rollout_of_prompt(run, sample, a, rollout_index)
    after = compare.rollout_of_prompt(other, sample, b, rollout_index)
    assert before is not None and after is not None  # both steps have rollouts of the row
    prompt = viewer.first_prompts(run, [sample]).get(sample, "")
    also = _more_rollouts(request, team_slug, sample, rollout_index)
    context = {
        "team": run.team,
        "run": run,
        "other": other,
        "sample": sample,
        "steps": steps,
        "other_steps": other_steps,
        "a": a,
        "b": b,
        "rollout": rollout_index,
        "form": form,
        "prompt": prompt,
        "question": user_question(prompt),
        "comparison": compare.compare_rollouts(before, after),
        "many": compare.compare_many([before, after, *also]) if also else None,
        "also": [f"{t.run_id}:{t.training_step}" for t in also],
    }
    return render(request, "results/prompt_compare.html", context)


def _more_rollouts(request: HttpRequest, team_slug: str, sample: int, rollout_index: int) -> list[Trajectory]:
    """The rollouts of the row that ``also=RUN:STEP`` adds to the two (docs/rollouts.md#same-prompt)."""
    found = []
    for run_id, step in compare.parse_sides(request.GET.getlist("also")):
        side = compare.rollout_of_prompt(
            get_run_for_user(request, team_slug, run_id), sample, step, rollout_index
        )
        if side is None:
            raise Http404(f"run {run_id} has no rollout of dataset row {sample} at step {step}")
        found.append(side)
    return found


@login_required
def prompt_compare_runs(request: HttpRequest, team_slug: str) -> HttpResponse:
    """One dataset row's newest rollout in each of the chosen runs (the compare page's form): the
    first run's page of the row with the others added."""
    get_team_for_user(request, team_slug)
    sample = request.GET.get("sample", "")
    if not sample.isdigit() or int(sample) > INT4_MAX:
        raise Http404("choose a dataset row")
    runs = [get_run_for_user(request, team_slug, pk) for pk in _run_ids(request)[: compare.MAX_SIDES]]
    sides = [(run, steps[-1]) for run in runs if (steps := compare.steps_of_prompt(run, int(sample)))]
    if len(sides) < 2:
        raise Http404(f"fewer than two of these runs have rollouts of dataset row {sample}")
    (first, a), (second, b), *more = sides
    query = urlencode(
        {"a": a, "run_b": second.pk, "b": b, "also": [f"{r.pk}:{s}" for r, s in more]}, doseq=True
    )
    return redirect(f"{reverse('prompt_compare', args=[team_slug, first.pk, sample])}?{query}")


def _run_ids(request: HttpRequest) -> list[int]:
    values = request.GET.getlist("run")
    return [int(v) for v in values if v.isdigit() and int(v) <= INT4_MAX]


@login_required
def run_histograms(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    """A measure's heat-map over every step and its histogram at one step; each bin links to the
    rollout list filtered to its trajectories (docs/rollouts.md#histograms)."""
    run = get_run_for_user(request, team_slug, run_id)
    form = HistogramForm(request.GET)
    data = form.cleaned_data if form.is_valid() else {}
    measure = data.get("measure") or histograms.DEFAULT_MEASURE
    latest = histograms.latest_step(run.pk)
    step = latest if data.get("step") is None else data["step"]
    heat = histograms.heat_map(run.pk, measure)
    chosen = histograms.step_histogram(run.pk, measure, step) if step is not None else None
    rollouts_url = reverse("rollouts", args=[team_slug, run.pk])
    context = {
        "team": run.team,
        "run": run,
        "form": form,
        "measure": measure,
        "step": step,
        "latest": latest,
        "heat": heat,
        "histogram": chosen,
        "bin_links": chosen.links(rollouts_url) if chosen else [],
        "chart": histograms.chart_data(heat, chosen, rollouts_url),
    }
    return render(request, "results/histograms.html", context)
