from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from webapp.experiments.models import Experiment, Run

logger = logging.getLogger(__name__)


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "task", "preset", "created", "external"]
    list_filter = ["team", "task", "preset", "external"]
    search_fields = ["name"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "experiment",
        "team",
        "status",
        "executor",
        "seed",
        "step",
        "total_steps",
        "created",
    ]
    list_filter = ["status", "executor", "team"]
    search_fields = ["name", "mlflow_run_id"]
    list_select_related = ["experiment", "team"]
    # A run's life belongs to its state machine (Run's guarded transitions), its token to the
    # launcher: the admin shows them and never writes them.
    readonly_fields = [
        "status",
        "step",
        "total_steps",
        "message",
        "executor",
        "executor_ref",
        "token_hash",
        "claimed_by",
        "cancel_requested",
        "cancel_requested_at",
        "cancelled_by",
        "queued_at",
        "started_at",
        "heartbeat_at",
        "progress_at",
        "finished_at",
        "mlflow_run_id",
        "created",
    ]
    actions = ["reopen_for_writes"]

    @admin.action(description="Reopen the selected ended external runs for MLflow writes")
    def reopen_for_writes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        """The one way an ended run takes writes again (docs/mlflow.md#access): explicit, by staff,
        in the admin's history and the log."""
        for run in queryset:
            if run.reopen_external():
                self.log_change(request, run, "Reopened for MLflow writes.")
                logger.warning("run %s reopened for writes by %s", run.pk, request.user)
