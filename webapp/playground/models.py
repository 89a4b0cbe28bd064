"""A playground session (one prompt, one or two models side by side) and its answers, each filled in
step by step by the worker so the page can show them while they run and after a reload
(docs/playground.md)."""

from __future__ import annotations

from typing import Any

from django.db import models

from webapp.accounts.models import Team
from webapp.experiments.jobs import Job
from webapp.experiments.models import Experiment, Run
from webapp.records import CreatedRecord

BASE_MODEL = "base"  # the choice of the experiment's own starting weights instead of a checkpoint


class AnswerStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class PlaygroundSession(CreatedRecord):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="playground_sessions")
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="playground_sessions")
    job = models.OneToOneField(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="playground_session"
    )
    prompt = models.TextField(help_text="The user's message, or the dataset row's last one.")
    row = models.JSONField(default=dict, help_text="The dataset row the agent ran (data contract).")
    source = models.CharField(max_length=300, blank=True, help_text="Which dataset row, if one was picked.")
    tools = models.JSONField(default=list, help_text="The experiment's tools offered to the agent.")
    budget = models.JSONField(default=dict, help_text="Steps, tokens and seconds each answer may spend.")

    class Meta(CreatedRecord.Meta):
        pass

    def __str__(self) -> str:
        return f"playground {self.pk}"

    @property
    def status(self) -> str:
        return self.job.status if self.job is not None else AnswerStatus.FAILED

    @property
    def is_finished(self) -> bool:
        return self.job is None or self.job.is_finished

    @property
    def ground_truth(self) -> Any:
        return (self.row.get("reward_model") or {}).get("ground_truth")


class PlaygroundAnswer(models.Model):
    """One model's answer: its steps (what the model wrote, its tool calls with their results), why it
    stopped, and its reward when the row has a ground truth."""

    session = models.ForeignKey(PlaygroundSession, on_delete=models.CASCADE, related_name="answers")
    position = models.PositiveSmallIntegerField()
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    step = models.IntegerField(
        null=True, blank=True, help_text="The checkpoint's step; none: the base model."
    )
    label = models.CharField(max_length=300)
    status = models.CharField(max_length=10, choices=AnswerStatus.choices, default=AnswerStatus.QUEUED)
    steps = models.JSONField(default=list)
    stop_reason = models.CharField(max_length=30, blank=True)
    reward = models.FloatField(null=True, blank=True)
    response_tokens = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True, help_text="Why it failed.")

    class Meta:
        ordering = ["session_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="playground_answer_position")
        ]

    def __str__(self) -> str:
        return f"{self.label} in {self.session}"

    @property
    def choice(self) -> str:
        return BASE_MODEL if self.run_id is None else f"{self.run_id}:{self.step}"
