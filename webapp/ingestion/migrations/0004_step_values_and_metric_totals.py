# Each training step's values of the histograms' measures (docs/rollouts.md#histograms) and the
# generated tokens' running total (docs/runs-and-curves.md#compare-runs), kept by ingestion from now
# on; the backfill computes both for what is stored already.

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

from webapp.ingestion import step_values
from webapp.ingestion.metrics_store import TOTALLED

# As metrics_store keeps it: the totalled keys only, NaN and +Infinity left out, NULL for a key
# without another value.
TOTALS = """
UPDATE results_metriclatest l SET total = p.total
FROM (SELECT p.run_id, p.key_id, sum(p.value) FILTER (WHERE p.value < 'Infinity') AS total
      FROM results_metricpoint p JOIN results_metrickey k ON k.id = p.key_id
      WHERE k.name = ANY(%s) GROUP BY p.run_id, p.key_id) AS p
WHERE l.run_id = p.run_id AND l.key_id = p.key_id
"""


def fill_step_values(apps: object, schema_editor: object) -> None:
    step_values.rebuild()


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0017_run_node"),
        ("ingestion", "0003_trajectory_reward_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="metriclatest",
            name="total",
            field=models.FloatField(null=True),
        ),
        migrations.CreateModel(
            name="StepValues",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "measure",
                        "training_step",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("measure", models.CharField(max_length=20)),
                ("training_step", models.IntegerField()),
                (
                    "values",
                    django.contrib.postgres.fields.ArrayField(base_field=models.FloatField(), size=None),
                ),
                (
                    "counts",
                    django.contrib.postgres.fields.ArrayField(base_field=models.IntegerField(), size=None),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="experiments.run",
                    ),
                ),
            ],
            options={
                "db_table": "results_stepvalues",
            },
        ),
        migrations.RunSQL([(TOTALS, [list(TOTALLED)])], migrations.RunSQL.noop),
        migrations.RunPython(fill_step_values, migrations.RunPython.noop),
    ]
