"""Health checks' state and alerts (docs/health.md): each team's rules and channels, each run's
verdicts, the alerts of their episodes and the members' notifications."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.experiments.models import Run
from webapp.guarded import guarded_update


class HealthRule(models.Model):
    """A team's setting for one health check (webapp.monitoring.checks.CHECKS): a row only where
    the team changed the default; no row means enabled, the check's default threshold, no stop."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="health_rules")
    check_name = models.CharField(max_length=40)
    enabled = models.BooleanField(default=True)
    threshold = models.FloatField()
    stop_run = models.BooleanField(default=False, help_text="Cancel the run when this check fires.")

    class Meta:
        db_table = "results_healthrule"
        constraints = [
            models.UniqueConstraint(fields=["team", "check_name"], name="one_health_rule_per_check")
        ]


class AlertChannels(models.Model):
    """Where a team's alerts go besides the app: a webhook and the members' email."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="alert_channels")
    webhook_url = models.URLField(max_length=500, blank=True)
    email = models.BooleanField(default=False, help_text="Email every member who has an address.")

    class Meta:
        db_table = "results_alertchannels"


class RunHealth(models.Model):
    """One check's state on one run: its recent points (the window it judges) and its verdict."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="health")
    check_name = models.CharField(max_length=40)
    firing = models.BooleanField(default=False)
    since_step = models.IntegerField(null=True, help_text="The step at which the current firing began.")
    step = models.IntegerField(null=True, help_text="The step of the latest verdict.")
    value = models.FloatField(null=True)
    episodes = models.IntegerField(default=0, help_text="How many times it has started firing.")
    window = models.JSONField(default=dict, help_text="metric key -> [[step, value], ...], finite only.")

    class Meta:
        db_table = "results_runhealth"
        constraints = [models.UniqueConstraint(fields=["run", "check_name"], name="one_health_row_per_check")]
        indexes = [models.Index(fields=["run"], condition=models.Q(firing=True), name="run_health_firing")]


class HealthAlert(models.Model):
    """One firing of one check on one run (an episode): alerted once, whatever the channels."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="health_alerts")
    check_name = models.CharField(max_length=40)
    episode = models.IntegerField()
    step = models.IntegerField()
    value = models.FloatField()
    threshold = models.FloatField()
    created = models.DateTimeField(auto_now_add=True)
    stopped_run = models.BooleanField(default=False)

    class Meta:
        db_table = "results_healthalert"
        constraints = [
            models.UniqueConstraint(fields=["run", "check_name", "episode"], name="one_alert_per_episode")
        ]
        ordering = ["-created", "-id"]

    @property
    def check_label(self) -> str:
        from webapp.monitoring.checks import CHECKS

        return CHECKS.get(self.check_name).label if self.check_name in CHECKS else self.check_name


class AlertChannel(models.TextChoices):
    EMAIL = "email"
    WEBHOOK = "webhook"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "waiting for its next try"
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class AlertDelivery(models.Model):
    """One alert on one channel: each try, its last error, and the outcome (docs/health.md#alerts)."""

    alert = models.ForeignKey(HealthAlert, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=10, choices=AlertChannel.choices)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True, help_text="Why the last try failed.")
    sent_at = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["alert", "channel"], name="one_delivery_per_channel")]
        ordering = ["alert_id", "channel"]

    def start_try(self) -> bool:
        """Claim the next try; False when another task holds it or the delivery is settled."""
        # Race: a task delivered twice (a redelivery beside the first); only one claims a try.
        pending = models.Q(status=DeliveryStatus.PENDING)
        return guarded_update(self, pending, status=DeliveryStatus.SENDING, attempts=models.F("attempts") + 1)

    def settle(self, error: str = "", *, final: bool = True) -> None:
        """The try's outcome: sent (no error); failed for good (``final``); else pending again."""
        status = (
            DeliveryStatus.SENT if not error else DeliveryStatus.FAILED if final else DeliveryStatus.PENDING
        )
        sent_at = timezone.now() if not error else None
        # Race: none: the try is this task's since start_try claimed it.
        AlertDelivery.objects.filter(pk=self.pk).update(status=status, error=error[:2000], sent_at=sent_at)
        self.refresh_from_db()


class Notification(models.Model):
    """An alert in a member's in-app list."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    alert = models.ForeignKey(HealthAlert, on_delete=models.CASCADE, related_name="notifications")
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "results_notification"
        constraints = [models.UniqueConstraint(fields=["user", "alert"], name="one_notification_per_user")]
        indexes = [
            models.Index(fields=["user"], condition=models.Q(read_at__isnull=True), name="unread_notes")
        ]
        ordering = ["-alert__created", "-id"]
