"""The trajectory, step and tool-call tables partitioned by run (docs/rollouts.md#partitioning).

Postgres' declarative partitioning, HASH (run_id) over PARTITIONS tables: a run's rows sit in one
partition, so its queries read one, and a team-wide search reads PARTITIONS tables, not one per run.
A partitioned table's primary key must hold the partition key, so the database's keys gain run_id
while Django's state keeps its own (the ids stay unique by their sequences); the foreign keys into
and out of these tables lose their database constraint (Django's collector still cascades). Each
table is made again partitioned, its rows copied, the old one dropped and its indexes and
constraints made again under their names.
"""

import django.db.models.deletion
from django.db import migrations, models

PARTITIONS = 16
TABLES = ("results_trajectory", "results_trajectorystep", "results_toolcall")
KEEP = "INCLUDING DEFAULTS INCLUDING STORAGE INCLUDING COMPRESSION"

STATEMENTS = [
    # Every index and key of the three tables, as Postgres would write it, to make again at the end.
    f"""CREATE TEMP TABLE partition_defs ON COMMIT DROP AS
    SELECT c.relname AS tab, i.relname AS name, substring(pg_get_indexdef(x.indexrelid) from ' USING .*$') AS how,
      k.contype AS contype, pg_get_constraintdef(k.oid) AS condef
    FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
    LEFT JOIN pg_constraint k ON k.conindid = x.indexrelid AND k.conrelid = x.indrelid
    WHERE c.relname IN {TABLES!r} AND c.relnamespace = current_schema()::regnamespace""",
    *(f"ALTER TABLE {table} RENAME TO {table}_old" for table in TABLES),
    f"CREATE TABLE results_trajectory (LIKE results_trajectory_old {KEEP}) PARTITION BY HASH (run_id)",
    f"""CREATE TABLE results_trajectorystep (LIKE results_trajectorystep_old {KEEP}, run_id bigint NOT NULL)
    PARTITION BY HASH (run_id)""",
    f"CREATE TABLE results_toolcall (LIKE results_toolcall_old {KEEP}) PARTITION BY HASH (run_id)",
    *(
        f"CREATE TABLE {table}_p{i} PARTITION OF {table} FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {i})"
        for table in TABLES
        for i in range(PARTITIONS)
    ),
    "INSERT INTO results_trajectory SELECT * FROM results_trajectory_old",
    """INSERT INTO results_trajectorystep SELECT s.*, t.run_id FROM results_trajectorystep_old s
    JOIN results_trajectory_old t ON t.id = s.trajectory_id""",
    "INSERT INTO results_toolcall SELECT * FROM results_toolcall_old",
    # The ids: a sequence each (the old identity goes with its table), going on from the largest id.
    *(
        statement
        for table in ("results_trajectory", "results_toolcall")
        for statement in (
            f"CREATE SEQUENCE {table}_new_id_seq OWNED BY {table}.id",
            f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT nextval('{table}_new_id_seq')",
            f"SELECT setval('{table}_new_id_seq', coalesce((SELECT max(id) FROM {table}), 0) + 1, false)",
        )
    ),
    "DROP TABLE results_toolcall_old, results_trajectorystep_old, results_trajectory_old CASCADE",
    "ALTER SEQUENCE results_trajectory_new_id_seq RENAME TO results_trajectory_id_seq",
    "ALTER SEQUENCE results_toolcall_new_id_seq RENAME TO results_toolcall_id_seq",
    # Keys gain the partition key; the other indexes (the GIN step_search too) are made as they were,
    # each partition's named after its parent's (step_search_p3: a query plan names the index it uses).
    f"""DO $$
    DECLARE d record; i int;
    BEGIN
      FOR d IN SELECT * FROM partition_defs LOOP
        IF d.contype = 'p' AND d.condef NOT LIKE '%run_id%' THEN
          EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', d.tab, d.name, replace(d.condef, ')', ', run_id)'));
        ELSIF d.contype IN ('p', 'u') THEN
          EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I %s', d.tab, d.name, d.condef);
        ELSE
          EXECUTE format('CREATE INDEX %I ON ONLY %I%s', d.name, d.tab, d.how);
          FOR i IN 0..{PARTITIONS - 1} LOOP
            EXECUTE format('CREATE INDEX %I ON %I%s', d.name || '_p' || i, d.tab || '_p' || i, d.how);
            EXECUTE format('ALTER INDEX %I ATTACH PARTITION %I', d.name, d.name || '_p' || i);
          END LOOP;
        END IF;
      END LOOP;
    END $$""",
]


def _field(**kwargs: object) -> models.ForeignKey:
    return models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, **kwargs)


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0011_run_cancel_reason"),
        ("results", "0008_retention_storage"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(STATEMENTS)],
            state_operations=[
                migrations.AddField(
                    model_name="trajectorystep",
                    name="run",
                    field=_field(db_index=False, default=0, related_name="+", to="experiments.run"),
                    preserve_default=False,
                ),
                migrations.AlterField(
                    model_name="trajectory",
                    name="run",
                    field=_field(related_name="trajectories", to="experiments.run"),
                ),
                migrations.AlterField(
                    model_name="trajectorystep",
                    name="trajectory",
                    field=_field(related_name="steps", to="results.trajectory"),
                ),
                migrations.AlterField(
                    model_name="toolcall",
                    name="trajectory",
                    field=_field(related_name="tool_calls", to="results.trajectory"),
                ),
            ],
        ),
    ]
