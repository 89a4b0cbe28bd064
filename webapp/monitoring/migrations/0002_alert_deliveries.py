from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models


def deliveries_from_alert_fields(apps: Any, schema_editor: Any) -> None:
    """Each alert's sent times and its one error become delivery rows (docs/health.md#alerts)."""
    alerts = apps.get_model("monitoring", "HealthAlert")
    deliveries = apps.get_model("monitoring", "AlertDelivery")
    rows = []
    for alert in alerts.objects.all().iterator():
        for channel, sent_at in (("email", alert.email_sent_at), ("webhook", alert.webhook_sent_at)):
            failed = alert.delivery_error.startswith(f"{channel}:")
            if sent_at is None and not failed:
                continue
            status = "failed" if failed else "sent"
            error = alert.delivery_error if failed else ""
            rows.append(
                deliveries(
                    alert=alert,
                    channel=channel,
                    status=status,
                    attempts=1,
                    error=error,
                    sent_at=None if failed else sent_at,
                )
            )
    deliveries.objects.bulk_create(rows, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("monitoring", "0001_moved_from_results")]

    operations = [
        migrations.CreateModel(
            name="AlertDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "channel",
                    models.CharField(choices=[("email", "Email"), ("webhook", "Webhook")], max_length=10),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "waiting for its next try"),
                            ("sending", "Sending"),
                            ("sent", "Sent"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=10,
                    ),
                ),
                ("attempts", models.PositiveSmallIntegerField(default=0)),
                ("error", models.TextField(blank=True, help_text="Why the last try failed.")),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                ("updated", models.DateTimeField(auto_now=True)),
                (
                    "alert",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="monitoring.healthalert",
                    ),
                ),
            ],
            options={
                "ordering": ["alert_id", "channel"],
                "constraints": [
                    models.UniqueConstraint(fields=("alert", "channel"), name="one_delivery_per_channel")
                ],
            },
        ),
        migrations.RunPython(deliveries_from_alert_fields, migrations.RunPython.noop),
        # Rows written in this transaction leave deferred foreign-key checks pending, and Postgres
        # alters no table with pending trigger events: run the checks now.
        migrations.RunSQL("SET CONSTRAINTS ALL IMMEDIATE", migrations.RunSQL.noop),
        migrations.RemoveField(model_name="healthalert", name="delivery_error"),
        migrations.RemoveField(model_name="healthalert", name="email_sent_at"),
        migrations.RemoveField(model_name="healthalert", name="webhook_sent_at"),
    ]
