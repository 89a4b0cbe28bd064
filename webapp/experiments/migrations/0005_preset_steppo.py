"""The StepPO preset is spelt ``steppo``, as Agent-R1 spells it; experiments and runs stored under the
old name ``stepppo`` take the new one, so their pages and their relaunches find the preset.

No alias is kept anywhere else: after this, ``stepppo`` is an unknown preset like any other.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

OLD, NEW = "stepppo", "steppo"


def rename_preset(apps: Any, schema_editor: Any) -> None:
    experiments = apps.get_model("experiments", "Experiment").objects
    experiments.filter(preset=OLD).update(preset=NEW)
    for model in ("Experiment", "Run"):
        for row in (
            apps.get_model("experiments", model).objects.filter(config__preset=OLD).only("pk", "config")
        ):
            row.config["preset"] = NEW
            row.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("experiments", "0004_stored_configs_fit_their_backend")]

    operations = [migrations.RunPython(rename_preset, migrations.RunPython.noop)]
