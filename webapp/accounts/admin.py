from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from webapp.accounts.models import ApiToken, Membership, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["team", "user", "role", "joined"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "team__name"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "hint", "created", "last_used", "revoked", "parent"]
    list_filter = ["revoked"]
    search_fields = ["name", "user__username", "hint"]
    # Only the hash is stored; nobody types one in. Revoking goes through the action, which revokes
    # the tokens a token issued with it (ApiToken.revoke).
    readonly_fields = ["user", "token_hash", "hint", "created", "last_used", "revoked", "parent"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens and the tokens they issued")
    def revoke(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for token in queryset:
            if token.revoke():
                self.log_change(request, token, "Revoked, with the tokens it issued.")

    def has_add_permission(self, request: object) -> bool:
        return False  # tokens are issued on the API tokens page, where the plain token is shown once
