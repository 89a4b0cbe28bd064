from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("results", "0001_initial")]

    operations = [
        migrations.AlterField(
            model_name="metrickey", name="name", field=models.CharField(max_length=250, unique=True)
        ),
    ]
