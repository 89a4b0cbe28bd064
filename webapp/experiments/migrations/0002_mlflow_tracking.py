"""MLflow-compatible tracking (issue 8): every run gets an MLflow run id, runs get params and tags,
and names grow to MLflow's limits."""

from __future__ import annotations

import uuid
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

import webapp.experiments.models


def give_each_run_its_own_id(apps: Any, schema_editor: Any) -> None:
    # A callable default is evaluated once for an AddField: existing rows would share one value.
    run_model = apps.get_model("experiments", "Run")
    for run in run_model.objects.only("pk").iterator():
        run_model.objects.filter(pk=run.pk).update(mlflow_run_id=uuid.uuid4().hex)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="run", name="mlflow_run_id", field=models.CharField(max_length=32, null=True)
        ),
        migrations.RunPython(give_each_run_its_own_id, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="run",
            name="mlflow_run_id",
            field=models.CharField(
                default=webapp.experiments.models.new_mlflow_run_id,
                editable=False,
                max_length=32,
                unique=True,
            ),
        ),
        migrations.RemoveField(model_name="run", name="params"),
        migrations.RemoveField(model_name="run", name="tags"),
        migrations.AlterField(model_name="experiment", name="name", field=models.CharField(max_length=500)),
        migrations.AlterField(
            model_name="run", name="name", field=models.CharField(blank=True, max_length=250)
        ),
        migrations.CreateModel(
            name="RunParam",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=250)),
                ("value", models.TextField()),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="params",
                        to="experiments.run",
                    ),
                ),
            ],
            options={
                "ordering": ["key"],
                "constraints": [models.UniqueConstraint(fields=("run", "key"), name="one_param_per_run_key")],
            },
        ),
        migrations.CreateModel(
            name="RunTag",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=250)),
                ("value", models.TextField()),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="tags", to="experiments.run"
                    ),
                ),
            ],
            options={
                "ordering": ["key"],
                "constraints": [models.UniqueConstraint(fields=("run", "key"), name="one_tag_per_run_key")],
            },
        ),
    ]
