"""Pages of labelling and review (docs/annotations.md): annotate a trajectory or a step, the team's
labels, review queues built from the rollout list, and rollouts saved as a dataset. Each: access
helper → form → one call of annotations / queues / promote → redirect or render."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts.access import get_membership, get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.experiments.access import get_run_for_user
from webapp.experiments.models import Run
from webapp.form_kit import labelled_errors
from webapp.ingestion.models import Trajectory
from webapp.rollouts import labelling, promote, queues
from webapp.rollouts.access import get_queue_for_user, get_trajectory_for_user
from webapp.rollouts.forms import RolloutFilterForm
from webapp.rollouts.models import Annotation
from webapp.rollouts.review_forms import AnnotationForm, LabelForm, PromoteForm, QueueForm, selected_ids
from webapp.rollouts.viewer import StepView, data_sources


def team_members(team: Team) -> list[str]:
    """Who may review: the team's members and owners, by user name."""
    return list(
        team.memberships.filter(role__in=[Role.MEMBER, Role.OWNER])
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )


def may_write(request: HttpRequest, team_slug: str) -> bool:
    return get_membership(request, team_slug).allows(Role.MEMBER)


@dataclass
class ItemReview:
    """What the trajectory page shows of one item: every reviewer's annotation and the user's own."""

    step: int | None  # None: the whole trajectory
    given: list[Annotation]
    mine: Annotation | None


def review_context(request: HttpRequest, trajectory: Trajectory, steps: list[StepView]) -> dict[str, object]:
    """What the trajectory page shows of labelling: the label keys, each item's annotations (the
    trajectory first, then its steps), and the queue it was opened from (docs/annotations.md#keys)."""
    team = trajectory.run.team
    given = list(labelling.annotations_of(trajectory))

    def review(step: int | None) -> ItemReview:
        own = [a for a in given if a.step_index == step]
        return ItemReview(step, own, next((a for a in own if a.author_id == request.user.pk), None))

    queue_id = request.GET.get("queue", "")
    queue = (
        team.review_queues.filter(pk=int(queue_id)).first()
        if queue_id.isdigit() and len(queue_id) < 10
        else None
    )
    position = queues.position_of(queue, trajectory.pk) if queue else None
    return {
        "labels": labelling.team_labels(team),
        "whole": review(None),
        "reviewed_steps": [(view, review(view.step.index)) for view in steps],
        "can_write": may_write(request, team.slug),
        "queue": queue if position is not None else None,
        "queue_position": position,
        "queue_progress": queues.progress(queues.item_views(queue))
        if queue and position is not None
        else None,
    }


def given_annotations(request: HttpRequest, trajectory: Trajectory, step: int | None) -> str:
    """The item's labels and notes as the trajectory page shows them, for the script to swap in
    after a save: the badge appears at once, without a reload (docs/annotations.md#keys)."""
    given = list(labelling.annotations_of(trajectory).filter(step_index=step))
    review = ItemReview(step, given, None)
    return render_to_string("rollouts/_given_annotations.html", {"review": review}, request)


@login_required
@require_POST
def annotate(request: HttpRequest, team_slug: str, run_id: int, pk: int) -> HttpResponse:
    """One reviewer's label, note and corrected answer on the trajectory or one step; the viewer's
    script asks for JSON (docs/annotations.md#keys), a plain form post is sent back to the page."""
    found = get_trajectory_for_user(request, team_slug, run_id, pk, write=True)
    form = AnnotationForm(request.POST)
    wants_json = request.headers.get("Accept", "").startswith("application/json")
    error = "" if form.is_valid() else "; ".join(str(e) for errors in form.errors.values() for e in errors)
    if not error:
        data = form.cleaned_data
        try:
            labelling.annotate(
                found,
                request.user,
                step_index=data["step"],
                label=data["label"],
                note=data["note"],
                corrected_answer=data["corrected_answer"],
            )
        except labelling.AnnotationRefused as exc:
            error = str(exc)
    if wants_json:
        if error:
            return JsonResponse({"error": error}, status=400)
        given = given_annotations(request, found, form.cleaned_data["step"])
        return JsonResponse({"label": form.cleaned_data["label"], "given": given})
    if error:
        messages.error(request, f"Not saved: {error}")
    target = reverse("trajectory", args=[team_slug, run_id, pk])
    queue = request.POST.get("queue", "")
    step = form.cleaned_data.get("step") if form.is_valid() else None
    anchor = f"#step-{step}" if step is not None else ""
    return redirect(f"{target}?{urlencode({'queue': queue})}{anchor}" if queue.isdigit() else target + anchor)


@login_required
def labels(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The team's label set; members add labels with a colour and a key."""
    team = get_team_for_user(request, team_slug)
    form = LabelForm(request.POST or None)
    if request.method == "POST":
        team = get_team_for_user(request, team_slug, role=Role.MEMBER)
        if form.is_valid():
            try:
                label = labelling.add_label(team, **form.cleaned_data)
            except labelling.AnnotationRefused as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Label {label.name!r} added on the key {label.key}.")
                return redirect("labels", team_slug)
    context = {
        "team": team,
        "labels": labelling.team_labels(team),
        "form": form,
        "can_write": may_write(request, team_slug),
    }
    return render(request, "rollouts/labels.html", context)


@login_required
def queue_list(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    found = team.review_queues.select_related("run", "created_by").prefetch_related("assignees")[:200]
    rows = [(queue, queues.progress(queues.item_views(queue))) for queue in found]
    return render(request, "rollouts/queues.html", {"team": team, "rows": rows})


@login_required
@require_POST
def queue_new(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    """A queue from the rollout list's filters (or a search within them), given in the query string."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    filters = RolloutFilterForm(request.GET, data_sources=data_sources(run), labels=_label_names(run.team))
    form = QueueForm(request.POST, members=team_members(run.team))
    back = reverse("rollouts", args=[team_slug, run.pk]) + "?" + request.GET.urlencode()
    if not form.is_valid():
        messages.error(request, "No queue: " + "; ".join(labelled_errors(form)))
        return redirect(back)
    data = form.cleaned_data
    criteria = queues.Criteria(
        filters.to_filter(), request.GET.get("q", "")[:200], data["order"], data["limit"]
    )
    assignees = get_user_model().objects.filter(username__in=data["assignees"])
    try:
        queue = queues.build_queue(
            run,
            criteria,
            name=data["name"],
            user=request.user,
            assignees=list(assignees),
            reviews_wanted=data["reviews_wanted"] or 1,
        )
    except queues.QueueRefused as exc:
        messages.error(request, f"No queue: {exc}")
        return redirect(back)
    return redirect("review_queue", team_slug, queue.pk)


def _label_names(team: Team) -> list[str]:
    return [label.name for label in labelling.team_labels(team)]


@login_required
def queue_detail(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    queue = get_queue_for_user(request, team_slug, pk)
    views = queues.item_views(queue)
    context = {
        "team": queue.team,
        "run": queue.run,
        "queue": queue,
        "items": views,
        "progress": queues.progress(views),
        "can_write": may_write(request, team_slug),
        "promote_form": PromoteForm(initial={"name": f"{queue.name} — reviewed"}),
    }
    return render(request, "rollouts/queue.html", context)


@login_required
def queue_next(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """The next item the user has to review (after ``?after=<position>``), or the queue when none is left."""
    queue = get_queue_for_user(request, team_slug, pk)
    after = request.GET.get("after", "")
    item = queues.next_for(queue, request.user, int(after) if after.isdigit() and len(after) < 9 else -1)
    if item is None:
        messages.info(request, "Nothing left for you to review in this queue.")
        return redirect("review_queue", team_slug, queue.pk)
    target = reverse("trajectory", args=[team_slug, queue.run_id, item.trajectory_id])
    return redirect(f"{target}?{urlencode({'queue': queue.pk})}")


@login_required
@require_POST
def queue_dataset(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    queue = get_queue_for_user(request, team_slug, pk, write=True)
    ids = list(queue.items.values_list("trajectory_id", flat=True))
    failed = reverse("review_queue", args=[team_slug, queue.pk])
    return _promote(request, queue.run, ids, failed)


@login_required
@require_POST
def rollouts_dataset(request: HttpRequest, team_slug: str, run_id: int) -> HttpResponse:
    """The ticked rollouts of the list, or when none is ticked every one its filters give."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    ids = selected_ids(request.POST.getlist("trajectory"))
    if not ids:
        filters = RolloutFilterForm(
            request.GET, data_sources=data_sources(run), labels=_label_names(run.team)
        )
        chosen = filters.to_filter().apply(run.trajectories.all()).order_by("-training_step", "id")
        ids = list(chosen.values_list("pk", flat=True)[: promote.PROMOTE_MAX + 1])
    failed = reverse("rollouts", args=[team_slug, run.pk]) + "?" + request.GET.urlencode()
    return _promote(request, run, ids, failed)


def _promote(request: HttpRequest, run: Run, ids: list[int], failed: str) -> HttpResponse:
    form = PromoteForm(request.POST)
    data = form.cleaned_data if form.is_valid() else {}
    try:
        dataset = promote.promote(
            run,
            ids,
            name=data.get("name", ""),
            user=request.user,
            corrected_only=data.get("corrected_only", False),
        )
    except promote.PromoteRefused as exc:
        messages.error(request, f"Not saved: {exc}")
        return redirect(failed)
    messages.success(request, f"Saved {dataset.stats.get('rows', '')} prompts as dataset {dataset.name!r}.")
    return redirect("dataset", dataset.team.slug, dataset.pk)
