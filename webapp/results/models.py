"""What the results pages keep of their own: published reference numbers and each user's layouts."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.accounts.models import Team
from webapp.experiments.models import Experiment


class ReferenceResult(models.Model):
    """Published numbers shown beside ours, never mixed into them (e.g. the Agent-R1 paper)."""

    source = models.CharField(max_length=200, help_text="Where the numbers come from, shown as the label.")
    method = models.CharField(max_length=100, help_text="Algorithm or baseline as the source names it.")
    algorithm = models.CharField(max_length=50, blank=True, help_text="Our preset name when there is one.")
    task = models.CharField(max_length=100)
    metric = models.CharField(max_length=100, help_text="e.g. acc, success_seen, score.")
    value = models.FloatField(help_text="As published (percent).")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "method", "task", "metric"], name="reference_result_unique"
            )
        ]
        ordering = ["source", "task", "metric", "method"]


class LayoutKind(models.TextChoices):
    RUNS_TABLE = "runs_table", "runs table columns"
    CURVES = "curves", "curve workspace panels"


class SavedLayout(models.Model):
    """How one user arranged a page of one team or experiment: the runs table's columns, the curve
    workspace's panels. Each user keeps their own, viewers too (it changes nothing of the team's)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=LayoutKind.choices)
    settings = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team", "experiment", "kind"],
                nulls_distinct=False,
                name="one_layout_per_scope",
            )
        ]

    @classmethod
    def load(
        cls, user: object, team: Team, experiment: Experiment | None, kind: str
    ) -> dict[str, object] | None:
        found = cls.objects.filter(user=user, team=team, experiment=experiment, kind=kind).first()
        return found.settings if found else None

    @classmethod
    def store(
        cls, user: object, team: Team, experiment: Experiment | None, kind: str, value: dict[str, object]
    ) -> None:
        # Race: two saves from two tabs; the unique constraint keeps one row and the last write wins.
        cls.objects.update_or_create(
            user=user, team=team, experiment=experiment, kind=kind, defaults={"settings": value}
        )
