"""RunParam and RunTag were the same table twice: one LoggedValue table holds both, told apart by its
kind. The param table becomes it (params are most of the rows, so they stay where they are) and the
tags are copied in; going back copies them out again."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

TAG = "tag"  # webapp.experiments.models.LoggedKind.TAG, as it was when this was written


def _tables(apps: Any, schema_editor: Any) -> tuple[str, str]:
    quote = schema_editor.quote_name
    logged = apps.get_model("experiments", "LoggedValue")._meta.db_table
    tags = apps.get_model("experiments", "RunTag")._meta.db_table
    return quote(logged), quote(tags)


def copy_tags_in(apps: Any, schema_editor: Any) -> None:
    logged, tags = _tables(apps, schema_editor)
    schema_editor.execute(
        f"INSERT INTO {logged} (run_id, kind, key, value) SELECT run_id, %s, key, value FROM {tags}", [TAG]
    )


def copy_tags_out(apps: Any, schema_editor: Any) -> None:
    logged, tags = _tables(apps, schema_editor)
    copy = f"INSERT INTO {tags} (run_id, key, value) SELECT run_id, key, value FROM {logged} WHERE kind = %s"
    schema_editor.execute(copy, [TAG])
    schema_editor.execute(f"DELETE FROM {logged} WHERE kind = %s", [TAG])


class Migration(migrations.Migration):
    dependencies = [("experiments", "0011_run_cancel_reason")]

    operations = [
        migrations.RemoveConstraint(model_name="runparam", name="one_param_per_run_key"),
        migrations.RenameModel(old_name="RunParam", new_name="LoggedValue"),
        migrations.AlterField(
            model_name="loggedvalue",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="logged", to="experiments.run"
            ),
        ),
        migrations.AddField(
            model_name="loggedvalue",
            name="kind",
            field=models.CharField(
                choices=[("param", "Param"), ("tag", "Tag")], default="param", max_length=5
            ),
            preserve_default=False,
        ),
        migrations.AddConstraint(
            model_name="loggedvalue",
            constraint=models.UniqueConstraint(
                fields=("run", "kind", "key"), name="one_value_per_run_kind_key"
            ),
        ),
        migrations.RunPython(copy_tags_in, copy_tags_out),
        migrations.DeleteModel(name="RunTag"),
    ]
