from __future__ import annotations

from django.contrib import admin

from webapp.tools.models import TeamTool, ToolTrial


@admin.register(TeamTool)
class TeamToolAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "kind", "status", "created"]
    list_filter = ["kind", "status", "team"]
    search_fields = ["name"]
    exclude = ["secret_encrypted"]  # set through the registration form only, where it is encrypted


@admin.register(ToolTrial)
class ToolTrialAdmin(admin.ModelAdmin):
    list_display = ["__str__", "team", "status", "error", "created"]
    list_filter = ["status"]
