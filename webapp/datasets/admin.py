from __future__ import annotations

from django.contrib import admin

from webapp.datasets.models import Dataset, RecipeImport


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "status", "size_bytes", "sha256", "created"]
    list_filter = ["status", "team"]
    search_fields = ["name", "sha256"]
    # Immutable: identity and content come from the file, never from a form.
    readonly_fields = [
        "team",
        "sha256",
        "size_bytes",
        "status",
        "problems",
        "stats",
        "source",
        "created_by",
        "validated_at",
    ]


@admin.register(RecipeImport)
class RecipeImportAdmin(admin.ModelAdmin):
    list_display = ["task", "team", "input_path", "status", "created"]
    list_filter = ["status", "task"]
