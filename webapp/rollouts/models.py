"""What people write about rollouts (docs/annotations.md): the team's labels, an annotation per
reviewer on a trajectory or one of its steps, review queues and their items, and which rollouts a
promoted dataset came from.

The trajectory foreign keys carry no database constraint, as every key into the partitioned rollout
tables (docs/rollouts.md#partitioning); Django's collector still deletes an annotation with its
trajectory, and each row holds its run so that a run's deletion cascades in the database too.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.models import Run
from webapp.ingestion.models import Trajectory
from webapp.records import CreatedRecord

# (name, colour, key) of the labels every team starts with (docs/annotations.md#labels).
DEFAULT_LABELS: tuple[tuple[str, str, str], ...] = (
    ("correct", "#2e7d32", "1"),
    ("wrong", "#c62828", "2"),
    ("reward hacking", "#6a1b9a", "3"),
    ("malformed tool call", "#ef6c00", "4"),
    ("format only", "#1565c0", "5"),
)
# Keys the viewer keeps for moving and opening (docs/annotations.md#keys): no label may take them.
RESERVED_KEYS = frozenset("jkn?")


class Label(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="labels")
    name = models.CharField(max_length=60)
    colour = models.CharField(max_length=7, help_text="#rrggbb")
    key = models.CharField(max_length=1, help_text="The key that puts this label on the focused item.")

    class Meta:
        ordering = ["key", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="label_name_unique_per_team"),
            models.UniqueConstraint(fields=["team", "key"], name="label_key_unique_per_team"),
        ]

    def __str__(self) -> str:
        return self.name


class Annotation(models.Model):
    """One reviewer's word on a trajectory (``step_index`` None) or one of its steps."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="annotations"
    )
    step_index = models.IntegerField(null=True, blank=True, help_text="None: the whole trajectory.")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    label = models.ForeignKey(Label, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    note = models.TextField(blank=True)
    corrected_answer = models.TextField(blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["trajectory", "step_index", "author"],
                name="one_annotation_per_item_per_author",
                nulls_distinct=False,
            )
        ]
        indexes = [models.Index(fields=["label", "trajectory"], name="annotation_label")]


class ReviewQueue(CreatedRecord):
    """Trajectories picked by a filter or a search of one run, for members to label."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="review_queues")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=200)
    criteria = models.JSONField(default=dict, help_text="The filter, search and order it was built from.")
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="review_queues")
    reviews_wanted = models.PositiveSmallIntegerField(
        default=1, help_text="Reviewers who label an item before it is done; more than one shows agreement."
    )

    class Meta(CreatedRecord.Meta):
        pass

    def __str__(self) -> str:
        return self.name


class QueueItem(models.Model):
    queue = models.ForeignKey(ReviewQueue, on_delete=models.CASCADE, related_name="items")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    position = models.IntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "trajectory"], name="queue_item_once"),
        ]


class PromotedRollout(models.Model):
    """Lineage: a trajectory whose prompt went into a dataset saved from rollouts."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    corrected = models.BooleanField(default=False, help_text="Its ground truth is a reviewer's answer.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "trajectory"], name="promoted_rollout_once"),
        ]
