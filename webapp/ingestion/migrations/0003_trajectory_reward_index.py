# A review queue of a run's lowest or highest rewards reads them in order from this index
# (docs/annotations.md#how-fast). A plain CREATE INDEX: on a partitioned table it builds one per partition.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ingestion", "0002_checkpoint_tags_and_deleted_by"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="trajectory",
            index=models.Index(fields=["run", "total_reward", "id"], name="traj_run_reward"),
        ),
    ]
