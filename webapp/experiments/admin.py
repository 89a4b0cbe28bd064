from __future__ import annotations

from django.contrib import admin

from webapp.experiments.models import Experiment, Run


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
