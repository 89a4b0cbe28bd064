"""Points stored under one of verl's keys before ingestion mapped them get their twin under our key
(trainer.backends.canonical_key), as a point arriving now does; the affected runs' summaries and
latest values are rebuilt. Running it again adds nothing."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from trainer.backends import canonical_key


def copy_under_our_keys(apps: Any, schema_editor: Any) -> None:
    # The table's rebuild is the store's own (plain SQL over these tables, no model of today).
    from webapp.ingestion.metrics_store import rebuild_summaries

    metric_key = apps.get_model("results", "MetricKey")
    pairs = [(key.pk, ours) for key in metric_key.objects.all() if (ours := canonical_key(key.name))]
    runs: set[int] = set()
    with schema_editor.connection.cursor() as cursor:
        for verl_id, ours in pairs:
            our_id = metric_key.objects.get_or_create(name=ours)[0].pk
            cursor.execute(
                "WITH copied AS (INSERT INTO results_metricpoint (run_id, key_id, step, value, ts) "
                "SELECT run_id, %s, step, value, ts FROM results_metricpoint WHERE key_id = %s "
                "ON CONFLICT DO NOTHING RETURNING run_id) SELECT DISTINCT run_id FROM copied",
                [our_id, verl_id],
            )
            runs.update(run_id for (run_id,) in cursor.fetchall())
    for run_id in sorted(runs):
        rebuild_summaries(run_id)


class Migration(migrations.Migration):
    dependencies = [("results", "0002_metrickey_name_250")]

    operations = [migrations.RunPython(copy_under_our_keys, migrations.RunPython.noop)]
