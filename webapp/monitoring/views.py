"""Pages of the health checks (docs/health.md): the team's settings (thresholds, switches, where
alerts go), the member's alert list, and the run page's time-breakdown data."""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from webapp.accounts.access import get_membership, get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.experiments.access import get_run_for_user
from webapp.monitoring import health, time_breakdown
from webapp.monitoring.models import AlertChannels, Notification
from webapp.tools.models import url_refusal

MAX_SHOWN_ALERTS = 100


class HealthSettingsForm(forms.Form):
    """One row per check (enabled, threshold, stop the run) and the team's alert channels."""

    webhook_url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        label="Webhook URL",
        help_text="Receives a JSON POST per alert (Slack reads its text).",
    )
    email = forms.BooleanField(required=False, label="Email every member with an address")

    def __init__(self, *args: Any, rules: dict[str, health.Rule], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rules = rules
        for name, rule in rules.items():
            self.fields[f"{name}-enabled"] = forms.BooleanField(
                required=False, initial=rule.enabled, label="on"
            )
            self.fields[f"{name}-threshold"] = forms.FloatField(
                required=False, initial=rule.threshold, label="threshold", help_text="blank: the default"
            )
            self.fields[f"{name}-stop"] = forms.BooleanField(
                required=False, initial=rule.stop_run, label="stop the run"
            )

    def clean_webhook_url(self) -> str:
        url: str = self.cleaned_data["webhook_url"]
        if url and (refusal := url_refusal(url)) is not None:
            raise forms.ValidationError(refusal)
        return url

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in self.rules:
            value = data.get(f"{name}-threshold")
            if value is not None and not math.isfinite(value):
                self.add_error(f"{name}-threshold", "Enter a finite number.")
        return data

    def rows(self) -> list[tuple[health.Rule, Any, Any, Any]]:
        return [
            (rule, self[f"{name}-enabled"], self[f"{name}-threshold"], self[f"{name}-stop"])
            for name, rule in self.rules.items()
        ]

    def save(self, team: Team) -> None:
        data = self.cleaned_data
        with transaction.atomic():
            for name in self.rules:
                threshold = data[f"{name}-threshold"]
                if threshold is None:
                    threshold = self.rules[name].check.threshold
                health.save_rule(
                    team,
                    name,
                    enabled=data[f"{name}-enabled"],
                    threshold=threshold,
                    stop_run=data[f"{name}-stop"],
                )
            AlertChannels.objects.update_or_create(
                team=team, defaults={"webhook_url": data["webhook_url"], "email": data["email"]}
            )


@login_required
def health_settings(request: HttpRequest, team_slug: str) -> HttpResponse:
    """GET: every member sees the settings; POST: owners change them."""
    team = get_team_for_user(request, team_slug, role=Role.OWNER if request.method == "POST" else Role.VIEWER)
    channels = AlertChannels.objects.filter(team=team).first()
    initial = {"webhook_url": channels.webhook_url, "email": channels.email} if channels else {}
    form = HealthSettingsForm(request.POST or None, initial=initial, rules=health.team_rules(team.pk))
    if request.method == "POST" and form.is_valid():
        form.save(team)
        messages.success(request, "Saved the health checks.")
        return redirect("health_settings", team_slug=team.slug)
    can_change = get_membership(request, team_slug).allows(Role.OWNER)
    status = 400 if form.is_bound else 200
    return render(
        request,
        "results/health_settings.html",
        {"team": team, "form": form, "can_change": can_change},
        status=status,
    )


@login_required
def notifications(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The member's alerts of this team, newest first; POST marks them read."""
    team = get_team_for_user(request, team_slug)
    mine = _notifications_of(request.user, team)
    if request.method == "POST":
        # Race: two tabs marking at once; the filter on read_at makes the second change nothing.
        mine.filter(read_at__isnull=True).update(read_at=timezone.now())
        return redirect("notifications", team_slug=team.slug)
    shown = mine.select_related("alert__run")[:MAX_SHOWN_ALERTS]
    return render(request, "results/notifications.html", {"team": team, "notes": shown})


def _notifications_of(user: Any, team: Team) -> Any:
    return Notification.objects.filter(user=user, alert__run__team=team)


@login_required
def run_time(request: HttpRequest, team_slug: str, run_id: int) -> JsonResponse:
    """The run page's stacked chart: seconds per part of each training step, and tokens per second."""
    run = get_run_for_user(request, team_slug, run_id)
    return JsonResponse(time_breakdown.breakdown(run))
