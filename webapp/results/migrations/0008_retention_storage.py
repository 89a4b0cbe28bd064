# Retention policies and storage counters (docs/rollouts.md#retention, docs/rollouts.md#storage).

import django.db.models.deletion
from django.db import migrations, models

# Runs that stored trajectories before this version: keep everything, counted as they stand (the
# texts they were first to store are not known: counted as none).
BACKFILL = """
INSERT INTO results_runstorage (run_id, retention, keep_successes, sample_fraction, received, kept,
  trajectory_bytes, step_bytes, token_signal_bytes, tool_call_bytes, text_bytes)
SELECT t.run_id, 'all', 4, 0.1, count(*), count(*), sum(pg_column_size(t.*)),
  coalesce((SELECT sum(pg_column_size(s.*)) - coalesce(sum(pg_column_size(s.token_signals)), 0)
    FROM results_trajectorystep s JOIN results_trajectory u ON u.id = s.trajectory_id WHERE u.run_id = t.run_id), 0),
  coalesce((SELECT sum(pg_column_size(s.token_signals))
    FROM results_trajectorystep s JOIN results_trajectory u ON u.id = s.trajectory_id WHERE u.run_id = t.run_id), 0),
  coalesce((SELECT sum(pg_column_size(c.*)) FROM results_toolcall c WHERE c.run_id = t.run_id), 0),
  0
FROM results_trajectory t GROUP BY t.run_id
"""


def retention_fields() -> list[tuple[str, models.Field]]:
    return [
        (
            "retention",
            models.CharField(
                choices=[
                    ("all", "keep everything"),
                    ("failures", "all failures plus k successes per training step"),
                    ("sample", "a sample of the trajectories"),
                ],
                default="all",
                max_length=10,
            ),
        ),
        ("keep_successes", models.IntegerField(default=4, help_text="k: successes kept per training step.")),
        (
            "sample_fraction",
            models.FloatField(default=0.1, help_text="The fraction of trajectories a sample keeps."),
        ),
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0011_run_cancel_reason"),
        ("results", "0007_token_signals_search"),
    ]

    operations = [
        migrations.CreateModel(
            name="ExperimentRetention",
            fields=[
                *retention_fields(),
                (
                    "experiment",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="retention",
                        serialize=False,
                        to="experiments.experiment",
                    ),
                ),
            ],
            options={"abstract": False},
        ),
        migrations.CreateModel(
            name="RunStorage",
            fields=[
                *retention_fields(),
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="storage",
                        serialize=False,
                        to="experiments.run",
                    ),
                ),
                (
                    "received",
                    models.BigIntegerField(
                        default=0, help_text="Trajectories that arrived (replays not counted)."
                    ),
                ),
                ("kept", models.BigIntegerField(default=0, help_text="Trajectories stored now.")),
                ("trajectory_bytes", models.BigIntegerField(default=0)),
                (
                    "step_bytes",
                    models.BigIntegerField(default=0, help_text="The steps' rows, less their token signals."),
                ),
                ("token_signal_bytes", models.BigIntegerField(default=0)),
                ("tool_call_bytes", models.BigIntegerField(default=0)),
                (
                    "text_bytes",
                    models.BigIntegerField(default=0, help_text="The texts this run was first to store."),
                ),
                (
                    "changed_at",
                    models.DateTimeField(blank=True, help_text="The policy was last changed.", null=True),
                ),
                (
                    "applied_at",
                    models.DateTimeField(
                        blank=True, help_text="... and applied to the stored data.", null=True
                    ),
                ),
            ],
            options={"abstract": False},
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
