"""Review queues (docs/annotations.md#queues): the trajectories of a filter or a search of one run, put
in front of members to label, with their progress and the reviewers' agreement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from webapp.experiments.models import Run
from webapp.ingestion.models import Trajectory
from webapp.rollouts.labelling import Agreement, agreement
from webapp.rollouts.models import Annotation, QueueItem, ReviewQueue
from webapp.rollouts.search import search_trajectory_ids
from webapp.rollouts.viewer import RolloutFilter

# How a queue's trajectories are picked from the filter: its name → the list's order.
ORDERS: dict[str, tuple[str, ...]] = {
    "lowest reward": ("total_reward", "id"),
    "highest reward": ("-total_reward", "id"),
    "newest": ("-training_step", "group_id", "rollout_index", "id"),
}
QUEUE_MAX = 500
MAX_REVIEWS = 5


def no_filter() -> RolloutFilter:
    """Every trajectory of the run (the filters' defaults)."""
    return RolloutFilter.model_validate({})


class QueueRefused(ValueError):
    """A queue that cannot be built; the message says why."""


@dataclass
class Criteria:
    """What a queue is built from: the rollout list's filters, a search within them, an order, a size."""

    filters: RolloutFilter = field(default_factory=no_filter)
    q: str = ""
    order: str = "lowest reward"
    limit: int = 50

    def as_json(self) -> dict[str, Any]:
        chosen = {k: v for k, v in self.filters.model_dump().items() if v not in (None, "")}
        return {"filters": chosen, "q": self.q, "order": self.order, "limit": self.limit}


def chosen_trajectories(run: Run, criteria: Criteria) -> list[int]:
    """The ids of the run's trajectories the criteria pick, in the queue's order."""
    if criteria.order not in ORDERS:
        raise QueueRefused(f"order by one of: {', '.join(ORDERS)}")
    if not 1 <= criteria.limit <= QUEUE_MAX:
        raise QueueRefused(f"a queue holds 1 to {QUEUE_MAX} trajectories")
    chosen = criteria.filters.apply(Trajectory.objects.filter(run=run))
    if criteria.q:
        found = search_trajectory_ids([run.pk], criteria.filters, criteria.q, limit=QUEUE_MAX)
        chosen = Trajectory.objects.filter(run=run, pk__in=set(found))
    return list(chosen.order_by(*ORDERS[criteria.order]).values_list("pk", flat=True)[: criteria.limit])


def build_queue(
    run: Run,
    criteria: Criteria,
    *,
    name: str,
    user: Any,
    assignees: Sequence[Any] = (),
    reviews_wanted: int = 1,
) -> ReviewQueue:
    if not 1 <= reviews_wanted <= MAX_REVIEWS:
        raise QueueRefused(f"an item wants 1 to {MAX_REVIEWS} reviewers")
    ids = chosen_trajectories(run, criteria)
    if not ids:
        raise QueueRefused("no trajectory matches: there is nothing to review")
    with transaction.atomic():
        queue = ReviewQueue.objects.create(
            team=run.team,
            run=run,
            name=(name.strip() or f"{criteria.order} of run {run.pk}")[:200],
            criteria=criteria.as_json(),
            created_by=user,
            reviews_wanted=reviews_wanted,
        )
        QueueItem.objects.bulk_create(
            QueueItem(queue=queue, trajectory_id=pk, position=i) for i, pk in enumerate(ids)
        )
        queue.assignees.set(assignees)
    return queue


@dataclass
class ItemView:
    item: QueueItem
    trajectory: Trajectory
    reviewers: dict[str, str]  # username → the label they gave the trajectory
    agreement: Agreement | None
    done: bool


@dataclass
class Progress:
    done: int
    total: int
    by_reviewer: dict[str, int]  # username → items they labelled

    @property
    def finished(self) -> bool:
        return self.done == self.total


def reviews(queue: ReviewQueue) -> dict[int, dict[str, str]]:
    """{trajectory: {reviewer: label}}: the labels given to the queue's trajectories as a whole."""
    rows = Annotation.objects.filter(
        trajectory_id__in=queue.items.values("trajectory_id"),
        step_index__isnull=True,
        label__isnull=False,
    ).values_list("trajectory_id", "author__username", "label__name")
    found: dict[int, dict[str, str]] = {}
    for trajectory_id, author, label in rows:
        found.setdefault(trajectory_id, {})[author] = label
    return found


def item_views(queue: ReviewQueue) -> list[ItemView]:
    given = reviews(queue)
    items = list(queue.items.all())
    trajectories = Trajectory.objects.defer("info", "metrics").in_bulk([i.trajectory_id for i in items])
    views = []
    for item in items:
        if item.trajectory_id not in trajectories:
            continue  # pruned by the run's retention since the queue was built
        labels = given.get(item.trajectory_id, {})
        views.append(
            ItemView(
                item,
                trajectories[item.trajectory_id],
                labels,
                agreement(labels.values()),
                len(labels) >= queue.reviews_wanted,
            )
        )
    return views


def progress(views: Sequence[ItemView]) -> Progress:
    by_reviewer: dict[str, int] = {}
    for view in views:
        for reviewer in view.reviewers:
            by_reviewer[reviewer] = by_reviewer.get(reviewer, 0) + 1
    return Progress(sum(v.done for v in views), len(views), dict(sorted(by_reviewer.items())))


def next_for(queue: ReviewQueue, user: Any, after: int = -1) -> QueueItem | None:
    """The next item ``user`` should review: not done, not labelled by them, after position ``after``
    (wrapping round to the start)."""
    given = reviews(queue)
    waiting = [
        item
        for item in queue.items.all()
        if len(given.get(item.trajectory_id, {})) < queue.reviews_wanted
        and user.get_username() not in given.get(item.trajectory_id, {})
    ]
    later = [item for item in waiting if item.position > after]
    chosen = later or waiting
    return chosen[0] if chosen else None


def position_of(queue: ReviewQueue, trajectory_id: int) -> int | None:
    return queue.items.filter(trajectory_id=trajectory_id).values_list("position", flat=True).first()
