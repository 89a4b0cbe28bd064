"""The retention models, moved here from the results app with their tables (docs/architecture.md#apps).

State only: each table keeps the name it had (``Meta.db_table = "results_<model>"``), its rows, keys
and indexes; results' 0012 removes the same models from that app's state.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("results", "0011_pending_token_signals"),
        ("experiments", "0011_run_cancel_reason"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ExperimentRetention",
                    fields=[
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
                        (
                            "keep_successes",
                            models.IntegerField(default=4, help_text="k: successes kept per training step."),
                        ),
                        (
                            "sample_fraction",
                            models.FloatField(
                                default=0.1, help_text="The fraction of trajectories a sample keeps."
                            ),
                        ),
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
                    options={
                        "db_table": "results_experimentretention",
                    },
                ),
                migrations.CreateModel(
                    name="RunStorage",
                    fields=[
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
                        (
                            "keep_successes",
                            models.IntegerField(default=4, help_text="k: successes kept per training step."),
                        ),
                        (
                            "sample_fraction",
                            models.FloatField(
                                default=0.1, help_text="The fraction of trajectories a sample keeps."
                            ),
                        ),
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
                            models.BigIntegerField(
                                default=0, help_text="The steps' rows, less their token signals."
                            ),
                        ),
                        ("token_signal_bytes", models.BigIntegerField(default=0)),
                        ("tool_call_bytes", models.BigIntegerField(default=0)),
                        (
                            "text_bytes",
                            models.BigIntegerField(
                                default=0, help_text="The texts this run was first to store."
                            ),
                        ),
                        (
                            "changed_at",
                            models.DateTimeField(
                                blank=True, help_text="The policy was last changed.", null=True
                            ),
                        ),
                        (
                            "applied_at",
                            models.DateTimeField(
                                blank=True, help_text="... and applied to the stored data.", null=True
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_runstorage",
                    },
                ),
            ],
        ),
    ]
