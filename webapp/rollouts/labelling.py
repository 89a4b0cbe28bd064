"""Labels and annotations (docs/annotations.md): the team's label set, one reviewer's annotation of a
trajectory or a step, and what the rollout list shows of them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from webapp.accounts.models import Team
from webapp.ingestion.models import Trajectory
from webapp.rollouts.models import DEFAULT_LABELS, RESERVED_KEYS, Annotation, Label

COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")
# The rollout list's label filter: these two match no label name (a name is stripped text).
ANY_LABEL, NO_LABEL = "(any)", "(none)"


class AnnotationRefused(ValueError):
    """A label or annotation the team cannot take; the message says why."""


def team_labels(team: Team) -> list[Label]:
    """The team's labels, the defaults made on first use."""
    labels = list(Label.objects.filter(team=team))
    if labels:
        return labels
    for name, colour, key in DEFAULT_LABELS:
        Label.objects.get_or_create(team=team, name=name, defaults={"colour": colour, "key": key})
    return list(Label.objects.filter(team=team))


def add_label(team: Team, name: str, colour: str, key: str) -> Label:
    name, key = name.strip(), key.strip()
    if not name or len(name) > 60 or name in (ANY_LABEL, NO_LABEL):
        raise AnnotationRefused("a label needs a name of 1 to 60 characters")
    if not COLOUR.match(colour):
        raise AnnotationRefused("the colour is written #rrggbb")
    if len(key) != 1 or key in RESERVED_KEYS or not key.isprintable() or key.isspace():
        raise AnnotationRefused(f"the key is one character, not one of {' '.join(sorted(RESERVED_KEYS))}")
    team_labels(team)
    try:
        with transaction.atomic():
            return Label.objects.create(team=team, name=name, colour=colour.lower(), key=key)
    except IntegrityError:
        raise AnnotationRefused(
            f"the team already has a label named {name!r} or on the key {key!r}"
        ) from None


def label_named(team: Team, name: str) -> Label | None:
    """The team's label ``name``; None for an empty name (an annotation without a label)."""
    if not name:
        return None
    found = next((label for label in team_labels(team) if label.name == name), None)
    if found is None:
        raise AnnotationRefused(f"the team has no label {name!r}")
    return found


def annotate(
    trajectory: Trajectory,
    author: Any,
    *,
    step_index: int | None,
    label: str,
    note: str = "",
    corrected_answer: str = "",
) -> Annotation:
    """Set ``author``'s annotation of the trajectory (or of its step): each reviewer has one per item,
    and a second call replaces the first."""
    if step_index is not None and not trajectory.own_steps().filter(index=step_index).exists():
        raise AnnotationRefused(f"the trajectory has no step {step_index}")
    chosen = label_named(trajectory.run.team, label)
    annotation, _ = Annotation.objects.update_or_create(
        trajectory=trajectory,
        step_index=step_index,
        author=author,
        defaults={
            "team_id": trajectory.run.team_id,
            "run_id": trajectory.run_id,
            "label": chosen,
            "note": note.strip(),
            "corrected_answer": corrected_answer.strip(),
        },
    )
    return annotation


def label_condition(label: str, prefix: str = "") -> Q:
    """The rollout list's label filter on a trajectory: one label's name, any label, or none."""
    labelled = Annotation.objects.filter(label__isnull=False)
    if label == NO_LABEL:
        return ~Q(**{prefix + "pk__in": labelled.values("trajectory_id")})
    if label != ANY_LABEL:
        labelled = labelled.filter(label__name=label)
    return Q(**{prefix + "pk__in": labelled.values("trajectory_id")})


@dataclass
class LabelCount:
    name: str
    colour: str
    count: int


def labels_by_trajectory(trajectory_ids: Iterable[int]) -> dict[int, list[LabelCount]]:
    """{trajectory: its labels (of it or any of its steps), most given first}, for a page of the list."""
    counts: dict[int, Counter[tuple[str, str]]] = {}
    rows = Annotation.objects.filter(trajectory_id__in=list(trajectory_ids), label__isnull=False).values_list(
        "trajectory_id", "label__name", "label__colour"
    )
    for trajectory_id, name, colour in rows:
        counts.setdefault(trajectory_id, Counter())[(name, colour)] += 1
    return {
        trajectory_id: [LabelCount(name, colour, n) for (name, colour), n in found.most_common()]
        for trajectory_id, found in counts.items()
    }


def annotations_of(trajectory: Trajectory) -> QuerySet[Annotation]:
    return (
        Annotation.objects.filter(trajectory=trajectory)
        .select_related("label", "author")
        .order_by("step_index", "author__username")
    )


@dataclass
class Agreement:
    label: str  # the label most reviewers gave
    agreeing: int
    reviewers: int

    @property
    def unanimous(self) -> bool:
        return self.agreeing == self.reviewers


def agreement(labels: Iterable[str]) -> Agreement | None:
    """How far the reviewers of one item agree: the most given label and how many gave it."""
    counts = Counter(labels)
    if not counts:
        return None
    label, agreeing = counts.most_common(1)[0]
    return Agreement(label, agreeing, sum(counts.values()))
