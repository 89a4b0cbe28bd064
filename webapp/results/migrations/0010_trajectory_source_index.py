# The rollout filters' list of a run's data sources, read by skipping through this index
# (docs/rollouts.md#search). A plain CREATE INDEX: on a partitioned table it builds one per partition.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("results", "0009_partition_rollouts"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="trajectory",
            index=models.Index(fields=["run", "data_source"], name="traj_run_source"),
        ),
    ]
