"""The monitoring models, moved here from the results app with their tables (docs/architecture.md#apps).

State only: each table keeps the name it had (``Meta.db_table = "results_<model>"``), its rows, keys
and indexes; results' 0012 removes the same models from that app's state.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("results", "0011_pending_token_signals"),
        ("accounts", "0003_apitoken_scopes_expiry"),
        ("experiments", "0011_run_cancel_reason"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AlertChannels",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("webhook_url", models.URLField(blank=True, max_length=500)),
                        (
                            "email",
                            models.BooleanField(
                                default=False, help_text="Email every member who has an address."
                            ),
                        ),
                        (
                            "team",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="alert_channels",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_alertchannels",
                    },
                ),
                migrations.CreateModel(
                    name="HealthAlert",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("check_name", models.CharField(max_length=40)),
                        ("episode", models.IntegerField()),
                        ("step", models.IntegerField()),
                        ("value", models.FloatField()),
                        ("threshold", models.FloatField()),
                        ("created", models.DateTimeField(auto_now_add=True)),
                        ("stopped_run", models.BooleanField(default=False)),
                        ("webhook_sent_at", models.DateTimeField(blank=True, null=True)),
                        ("email_sent_at", models.DateTimeField(blank=True, null=True)),
                        ("delivery_error", models.TextField(blank=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="health_alerts",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_healthalert",
                        "ordering": ["-created", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="HealthRule",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("check_name", models.CharField(max_length=40)),
                        ("enabled", models.BooleanField(default=True)),
                        ("threshold", models.FloatField()),
                        (
                            "stop_run",
                            models.BooleanField(
                                default=False, help_text="Cancel the run when this check fires."
                            ),
                        ),
                        (
                            "team",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="health_rules",
                                to="accounts.team",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_healthrule",
                    },
                ),
                migrations.CreateModel(
                    name="Notification",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("read_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "alert",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="notifications",
                                to="monitoring.healthalert",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_notification",
                        "ordering": ["-alert__created", "-id"],
                    },
                ),
                migrations.CreateModel(
                    name="RunHealth",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("check_name", models.CharField(max_length=40)),
                        ("firing", models.BooleanField(default=False)),
                        (
                            "since_step",
                            models.IntegerField(
                                help_text="The step at which the current firing began.", null=True
                            ),
                        ),
                        ("step", models.IntegerField(help_text="The step of the latest verdict.", null=True)),
                        ("value", models.FloatField(null=True)),
                        (
                            "episodes",
                            models.IntegerField(default=0, help_text="How many times it has started firing."),
                        ),
                        (
                            "window",
                            models.JSONField(
                                default=dict, help_text="metric key -> [[step, value], ...], finite only."
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="health",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_runhealth",
                    },
                ),
                migrations.AddConstraint(
                    model_name="healthalert",
                    constraint=models.UniqueConstraint(
                        fields=("run", "check_name", "episode"), name="one_alert_per_episode"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="healthrule",
                    constraint=models.UniqueConstraint(
                        fields=("team", "check_name"), name="one_health_rule_per_check"
                    ),
                ),
                migrations.AddIndex(
                    model_name="notification",
                    index=models.Index(
                        condition=models.Q(("read_at__isnull", True)), fields=["user"], name="unread_notes"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="notification",
                    constraint=models.UniqueConstraint(
                        fields=("user", "alert"), name="one_notification_per_user"
                    ),
                ),
                migrations.AddIndex(
                    model_name="runhealth",
                    index=models.Index(
                        condition=models.Q(("firing", True)), fields=["run"], name="run_health_firing"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="runhealth",
                    constraint=models.UniqueConstraint(
                        fields=("run", "check_name"), name="one_health_row_per_check"
                    ),
                ),
            ],
        ),
    ]
