from __future__ import annotations

from django.contrib import admin

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
    list_display = ["name", "user", "hint", "created", "last_used", "revoked"]
    list_filter = ["revoked"]
    search_fields = ["name", "user__username", "hint"]
    # Only the hash is stored; nobody types one in. Revoke by setting "revoked".
    readonly_fields = ["user", "token_hash", "hint", "created", "last_used"]

    def has_add_permission(self, request: object) -> bool:
        return False  # tokens are issued on the API tokens page, where the plain token is shown once
