"""Stored verl configs say what verl did: it trained every group, so skip_zero_advantage_groups is false.

The verl backend now refuses algorithm.skip_zero_advantage_groups = true (verl has no such setting),
and the field's default became false; configs stored before that carried the old default true.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def train_every_group(apps: Any, schema_editor: Any) -> None:
    for model in ("Experiment", "Run"):
        rows = apps.get_model("experiments", model).objects.filter(
            config__backend="verl", config__algorithm__skip_zero_advantage_groups=True
        )
        for row in rows.only("pk", "config"):
            row.config["algorithm"]["skip_zero_advantage_groups"] = False
            row.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("experiments", "0002_mlflow_tracking")]

    operations = [migrations.RunPython(train_every_group, migrations.RunPython.noop)]
