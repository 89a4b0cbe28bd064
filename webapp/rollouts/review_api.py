"""REST of labelling and review (docs/annotations.md#rest-and-cli): the team's labels, annotations of
a trajectory or a step, review queues with their progress and agreement, and rollouts saved as a
dataset. Personal API token; a viewer reads, a member writes; other teams' objects are 404."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import StrictSchema
from webapp.datasets.api import DatasetOut
from webapp.datasets.models import Dataset
from webapp.experiments.access import get_run_for_user
from webapp.ingestion.models import Trajectory
from webapp.rollouts import labelling, promote, queues
from webapp.rollouts.access import get_queue_for_user
from webapp.rollouts.models import Annotation, ReviewQueue
from webapp.rollouts.queues import MAX_REVIEWS, QUEUE_MAX, no_filter
from webapp.rollouts.viewer import RolloutFilter

router = Router(auth=UserTokenAuth(), tags=["review"])


class LabelOut(Schema):
    name: str
    colour: str
    key: str


class LabelIn(StrictSchema):
    name: str = Field(max_length=60)
    colour: str = Field(description="#rrggbb")
    key: str = Field(min_length=1, max_length=1, description="Not j, k, n or ?.")


class AnnotationIn(StrictSchema):
    step: int | None = Field(None, ge=0, description="A step's index; absent: the whole trajectory.")
    label: str = Field("", max_length=60, description="A label of the team; empty: none.")
    note: str = Field("", max_length=10_000)
    corrected_answer: str = Field("", max_length=10_000)


class AnnotationOut(Schema):
    step: int | None = Field(alias="step_index")
    label: str | None
    author: str
    note: str
    corrected_answer: str

    @staticmethod
    def resolve_label(obj: Annotation) -> str | None:
        return obj.label.name if obj.label else None

    @staticmethod
    def resolve_author(obj: Annotation) -> str:
        return str(obj.author.get_username())


class QueueIn(StrictSchema):
    name: str = Field("", max_length=200)
    filters: RolloutFilter = Field(default_factory=no_filter)
    q: str = Field("", max_length=200, description="A search within the filters (docs/rollouts.md#search).")
    order: str = Field("lowest reward", description=f"One of: {', '.join(queues.ORDERS)}.")
    limit: int = Field(50, ge=1, le=QUEUE_MAX)
    reviews_wanted: int = Field(1, ge=1, le=MAX_REVIEWS)
    assignees: list[str] = Field(default_factory=list, description="User names of members of the team.")


class QueueItemOut(Schema):
    position: int
    trajectory: str  # its uid
    training_step: int
    total_reward: float
    reviewers: dict[str, str]  # user name → label
    agreement: float | None  # the share of reviewers who gave the most given label
    done: bool


class QueueOut(Schema):
    id: int
    name: str
    run: int
    criteria: dict[str, Any]
    assignees: list[str]
    reviews_wanted: int
    done: int
    total: int


class QueueDetailOut(QueueOut):
    items: list[QueueItemOut]


class PromoteIn(StrictSchema):
    name: str = Field("", max_length=200)
    corrected_only: bool = False


class RolloutsPromoteIn(PromoteIn):
    trajectories: list[str] = Field(
        default_factory=list,
        max_length=promote.PROMOTE_MAX,
        description="Trajectory ids; empty: the filters'.",
    )
    filters: RolloutFilter = Field(default_factory=no_filter)


def _queue_out(queue: ReviewQueue, *, with_items: bool) -> dict[str, Any]:
    views = queues.item_views(queue)
    progress = queues.progress(views)
    out: dict[str, Any] = {
        "id": queue.pk,
        "name": queue.name,
        "run": queue.run_id,
        "criteria": queue.criteria,
        "assignees": [u.get_username() for u in queue.assignees.all()],
        "reviews_wanted": queue.reviews_wanted,
        "done": progress.done,
        "total": progress.total,
    }
    if with_items:
        out["items"] = [_item_out(view) for view in views]
    return out


def _item_out(view: queues.ItemView) -> dict[str, Any]:
    share = view.agreement.agreeing / view.agreement.reviewers if view.agreement else None
    return {
        "position": view.item.position,
        "trajectory": view.trajectory.uid,
        "training_step": view.trajectory.training_step,
        "total_reward": view.trajectory.total_reward,
        "reviewers": view.reviewers,
        "agreement": share,
        "done": view.done,
    }


@router.get("/{team_slug}/labels", response=list[LabelOut], summary="The team's labels")
def labels(request: HttpRequest, team_slug: str) -> list[Any]:
    return list(labelling.team_labels(get_team_for_user(request, team_slug)))


@router.post("/{team_slug}/labels", response={201: LabelOut}, summary="Add a label")
def add_label(request: HttpRequest, team_slug: str, body: LabelIn) -> tuple[int, Any]:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    try:
        return 201, labelling.add_label(team, body.name, body.colour, body.key)
    except labelling.AnnotationRefused as exc:
        raise HttpError(400, str(exc)) from None


def _trajectory(request: HttpRequest, team_slug: str, run_id: int, uid: str, *, write: bool) -> Trajectory:
    run = get_run_for_user(request, team_slug, run_id, write=write)
    return get_object_or_404(Trajectory.objects.select_related("run__team"), run=run, uid=uid)


@router.get(
    "/{team_slug}/runs/{int:run_id}/trajectories/{uid}/annotations",
    response=list[AnnotationOut],
    summary="A trajectory's annotations",
)
def trajectory_annotations(request: HttpRequest, team_slug: str, run_id: int, uid: str) -> list[Any]:
    return list(labelling.annotations_of(_trajectory(request, team_slug, run_id, uid, write=False)))


@router.post(
    "/{team_slug}/runs/{int:run_id}/trajectories/{uid}/annotations",
    response=AnnotationOut,
    summary="Annotate a trajectory or one of its steps",
)
def annotate(request: HttpRequest, team_slug: str, run_id: int, uid: str, body: AnnotationIn) -> Annotation:
    """The caller's own annotation of the item; a second call replaces it."""
    found = _trajectory(request, team_slug, run_id, uid, write=True)
    try:
        return labelling.annotate(
            found,
            request.user,
            step_index=body.step,
            label=body.label,
            note=body.note,
            corrected_answer=body.corrected_answer,
        )
    except labelling.AnnotationRefused as exc:
        raise HttpError(400, str(exc)) from None


@router.get("/{team_slug}/queues", response=list[QueueOut], summary="Review queues")
def queue_list(request: HttpRequest, team_slug: str) -> list[dict[str, Any]]:
    team = get_team_for_user(request, team_slug)
    return [_queue_out(q, with_items=False) for q in team.review_queues.prefetch_related("assignees")[:200]]


@router.post("/{team_slug}/runs/{int:run_id}/queues", response={201: QueueDetailOut}, summary="Build a queue")
def queue_new(request: HttpRequest, team_slug: str, run_id: int, body: QueueIn) -> tuple[int, dict[str, Any]]:
    """From the rollout list's filters, a search within them, an order and a size."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    members = run.team.memberships.filter(
        role__in=[Role.MEMBER, Role.OWNER], user__username__in=body.assignees
    )
    found = get_user_model().objects.filter(pk__in=members.values("user_id"))
    if found.count() != len(set(body.assignees)):
        raise HttpError(400, "assignees: each must be a member of the team")
    criteria = queues.Criteria(body.filters, body.q, body.order, body.limit)
    try:
        queue = queues.build_queue(
            run,
            criteria,
            name=body.name,
            user=request.user,
            assignees=list(found),
            reviews_wanted=body.reviews_wanted,
        )
    except queues.QueueRefused as exc:
        raise HttpError(400, str(exc)) from None
    return 201, _queue_out(queue, with_items=True)


@router.get("/{team_slug}/queues/{int:pk}", response=QueueDetailOut, summary="A queue with its items")
def queue_detail(request: HttpRequest, team_slug: str, pk: int) -> dict[str, Any]:
    return _queue_out(get_queue_for_user(request, team_slug, pk), with_items=True)


@router.post(
    "/{team_slug}/queues/{int:pk}/dataset", response={201: DatasetOut}, summary="Save a queue as a dataset"
)
def queue_dataset(request: HttpRequest, team_slug: str, pk: int, body: PromoteIn) -> tuple[int, Dataset]:
    queue = get_queue_for_user(request, team_slug, pk, write=True)
    ids = list(queue.items.values_list("trajectory_id", flat=True))
    return 201, _promote(queue.run, ids, body, request.user)


@router.post(
    "/{team_slug}/runs/{int:run_id}/datasets",
    response={201: DatasetOut},
    summary="Save rollouts as a dataset",
)
def rollouts_dataset(
    request: HttpRequest, team_slug: str, run_id: int, body: RolloutsPromoteIn
) -> tuple[int, Dataset]:
    """The trajectories named, or when none is named every one the filters give."""
    run = get_run_for_user(request, team_slug, run_id, write=True)
    chosen = (
        run.trajectories.filter(uid__in=body.trajectories)
        if body.trajectories
        else body.filters.apply(run.trajectories.all())
    )
    ids = list(
        chosen.order_by("-training_step", "id").values_list("pk", flat=True)[: promote.PROMOTE_MAX + 1]
    )
    return 201, _promote(run, ids, body, request.user)


def _promote(run: Any, ids: list[int], body: PromoteIn, user: Any) -> Dataset:
    try:
        return promote.promote(run, ids, name=body.name, user=user, corrected_only=body.corrected_only)
    except promote.PromoteRefused as exc:
        raise HttpError(400, str(exc)) from None
