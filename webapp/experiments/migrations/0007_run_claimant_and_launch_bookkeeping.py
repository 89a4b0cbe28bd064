"""Runs record their claimant id, the launch request they came from, and their starts
(docs/reliability.md).

Runs starting when this is applied take their queue time as the start of their start, so the
watchdog's limits keep counting from there. Runs claimed before have no claimant id: a trainer
started by an earlier version sends none and is refused (409) from here on, so relaunch runs that
are in flight across this upgrade.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import F


def date_the_starts(apps: Any, schema_editor: Any) -> None:
    runs = apps.get_model("experiments", "Run").objects
    runs.filter(status="starting", starting_at__isnull=True).update(
        starting_at=F("queued_at"), launch_attempts=1
    )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_apitoken"),
        ("experiments", "0006_runs_table"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="claimant",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="run",
            name="launch_attempts",
            field=models.PositiveSmallIntegerField(default=0, help_text="Starts tried, relaunches included."),
        ),
        migrations.AddField(
            model_name="run",
            name="launch_key",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="run",
            name="starting_at",
            field=models.DateTimeField(blank=True, help_text="When the latest start began.", null=True),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("launch_key", ""), _negated=True),
                fields=("experiment", "seed", "launch_key"),
                name="one_run_per_seed_and_launch_key",
            ),
        ),
        migrations.RunPython(date_the_starts, migrations.RunPython.noop),
    ]
