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
    readonly_fields = ["token_hash", "claimed_by", "executor_ref"]
