"""Configs stored before ``data.reward_rule`` existed scored verl's data sources by our lenient rewards:
they say so now (``data.reward_rule = "lenient"``), so their pages show the rule their runs trained with
and a relaunch trains the same way; new configs default to verl's rule (docs/rewards.md#verl-and-lenient-rules).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

RULE_BEFORE = "lenient"


def keep_the_lenient_rule(apps: Any, schema_editor: Any) -> None:
    for model in ("Experiment", "Run"):
        rows = apps.get_model("experiments", model).objects.exclude(config={})
        for row in rows.exclude(config__data__has_key="reward_rule").only("pk", "config").iterator():
            data = row.config.get("data")
            if isinstance(data, dict):
                data["reward_rule"] = RULE_BEFORE
                row.save(update_fields=["config"])


class Migration(migrations.Migration):
    dependencies = [("experiments", "0013_jobs")]

    operations = [migrations.RunPython(keep_the_lenient_rule, migrations.RunPython.noop)]
