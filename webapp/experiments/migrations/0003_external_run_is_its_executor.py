"""One mark of an external run: its executor is "external" (Run.is_external). The Run.external flag,
which said the same, goes; runs that had it keep their executor "external"."""

from __future__ import annotations

from typing import Any

from django.db import migrations

EXTERNAL = "external"  # webapp.experiments.models.EXTERNAL_EXECUTOR, as it was when this was written


def mark_by_executor(apps: Any, schema_editor: Any) -> None:
    apps.get_model("experiments", "Run").objects.filter(external=True).update(executor=EXTERNAL)


def mark_by_flag(apps: Any, schema_editor: Any) -> None:
    apps.get_model("experiments", "Run").objects.filter(executor=EXTERNAL).update(external=True)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0002_mlflow_tracking")]

    operations = [
        migrations.RunPython(mark_by_executor, mark_by_flag),
        migrations.RemoveField(model_name="run", name="external"),
    ]
