"""Stored configs say what their backend did, now that each backend refuses what it cannot honour.

Without this, a stored config the new checks refuse would no longer load (its pages and its runs).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def fit_their_backend(apps: Any, schema_editor: Any) -> None:
    for model in ("Experiment", "Run"):
        rows = apps.get_model("experiments", model).objects
        # verl trained every group; the field's default used to be true.
        verl = rows.filter(config__backend="verl", config__algorithm__skip_zero_advantage_groups=True)
        _set(verl, "algorithm", "skip_zero_advantage_groups", False)
        # torch trained on one GPU; asking for more only made its Ray job hold idle ones.
        torch = rows.filter(config__backend="torch", config__resources__gpus_per_node__gt=1)
        _set(torch, "resources", "gpus_per_node", 1)


def _set(rows: Any, section: str, field: str, value: Any) -> None:
    for row in rows.only("pk", "config"):
        row.config[section][field] = value
        row.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("experiments", "0003_external_run_is_its_executor")]

    operations = [migrations.RunPython(fit_their_backend, migrations.RunPython.noop)]
