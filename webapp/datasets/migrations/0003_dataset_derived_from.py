from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("datasets", "0002_reward_map_archive_recipe_options")]

    operations = [
        migrations.AddField(
            model_name="dataset",
            name="derived_from",
            field=models.ForeignKey(
                blank=True,
                help_text="The dataset this one was made from (generated demonstrations).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="derived",
                to="datasets.dataset",
            ),
        ),
    ]
