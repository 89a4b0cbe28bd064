import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retention", "0001_moved_from_results"),
        ("experiments", "0015_run_kind_sft_and_started_from"),
    ]

    operations = [
        migrations.CreateModel(
            name="CheckpointKeepPolicy",
            fields=[
                (
                    "experiment",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="checkpoint_policy",
                        serialize=False,
                        to="experiments.experiment",
                    ),
                ),
                (
                    "keep_last",
                    models.PositiveIntegerField(
                        blank=True, help_text="The newest k; none: no such rule.", null=True
                    ),
                ),
                (
                    "keep_every",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Those whose step is a multiple of n; none: no such rule.",
                        null=True,
                    ),
                ),
                (
                    "keep_best_metric",
                    models.CharField(
                        blank=True, help_text="A metric key; empty: no such rule.", max_length=200
                    ),
                ),
                (
                    "keep_best_mode",
                    models.CharField(
                        choices=[("max", "highest"), ("min", "lowest")], default="max", max_length=3
                    ),
                ),
                ("keep_best_count", models.PositiveIntegerField(default=1)),
            ],
        ),
    ]
