"""The ingestion models, moved here from the results app with their tables (docs/architecture.md#apps).

State only: each table keeps the name it had (``Meta.db_table = "results_<model>"``), its rows, keys
and indexes; results' 0012 removes the same models from that app's state.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("results", "0011_pending_token_signals"),
        ("experiments", "0011_run_cancel_reason"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MetricKey",
                    fields=[
                        ("id", models.AutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=250, unique=True)),
                    ],
                    options={
                        "db_table": "results_metrickey",
                    },
                ),
                migrations.CreateModel(
                    name="TextBlob",
                    fields=[
                        ("sha256", models.CharField(max_length=64, primary_key=True, serialize=False)),
                        ("data", models.BinaryField()),
                        ("compressed", models.BooleanField(default=False)),
                        ("size", models.IntegerField(help_text="Length of the text in UTF-8 bytes.")),
                    ],
                    options={
                        "db_table": "results_textblob",
                    },
                ),
                migrations.CreateModel(
                    name="Checkpoint",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("step", models.IntegerField()),
                        ("path", models.TextField()),
                        ("metrics", models.JSONField(default=dict)),
                        ("size_bytes", models.BigIntegerField(blank=True, null=True)),
                        ("deleted", models.BooleanField(default=False)),
                        ("received", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="checkpoints",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_checkpoint",
                        "ordering": ["run_id", "step"],
                    },
                ),
                migrations.CreateModel(
                    name="IngestBatch",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id",
                                "batch_id",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("batch_id", models.CharField(max_length=64)),
                        ("kind", models.CharField(max_length=16)),
                        ("received", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_ingestbatch",
                    },
                ),
                migrations.CreateModel(
                    name="LogChunk",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id", "seq", blank=True, editable=False, primary_key=True, serialize=False
                            ),
                        ),
                        ("seq", models.IntegerField()),
                        ("text", models.TextField()),
                        ("received", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="log_chunks",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_logchunk",
                        "ordering": ["run_id", "seq"],
                    },
                ),
                migrations.CreateModel(
                    name="MetricLatest",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id",
                                "key_id",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("step", models.IntegerField()),
                        ("value", models.FloatField()),
                        ("ts", models.FloatField()),
                        (
                            "key",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="ingestion.metrickey",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="latest_metrics",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_metriclatest",
                    },
                ),
                migrations.CreateModel(
                    name="MetricPoint",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id",
                                "key_id",
                                "step",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("step", models.IntegerField()),
                        ("value", models.FloatField()),
                        ("ts", models.FloatField(help_text="Unix time the trainer logged the point.")),
                        (
                            "key",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="ingestion.metrickey",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_metricpoint",
                    },
                ),
                migrations.CreateModel(
                    name="MetricSummary",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "run_id",
                                "key_id",
                                "level",
                                "bucket",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("level", models.SmallIntegerField()),
                        ("bucket", models.IntegerField(help_text="step // width of the level")),
                        ("n", models.IntegerField()),
                        ("min_value", models.FloatField()),
                        ("min_step", models.IntegerField()),
                        ("min_ts", models.FloatField()),
                        ("max_value", models.FloatField()),
                        ("max_step", models.IntegerField()),
                        ("max_ts", models.FloatField()),
                        (
                            "key",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="ingestion.metrickey",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_metricsummary",
                    },
                ),
                migrations.CreateModel(
                    name="Trajectory",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "uid",
                            models.CharField(
                                help_text="The trainer's trajectory id; unique in its run.", max_length=200
                            ),
                        ),
                        (
                            "group_id",
                            models.CharField(
                                help_text="Prompt uid shared by the n samples of one prompt.", max_length=200
                            ),
                        ),
                        ("sample_index", models.IntegerField(help_text="Dataset row (extra_info.index).")),
                        ("rollout_index", models.IntegerField(default=0)),
                        ("training_step", models.IntegerField()),
                        ("data_source", models.CharField(blank=True, max_length=100)),
                        ("ground_truth", models.JSONField(null=True)),
                        ("total_reward", models.FloatField()),
                        ("success", models.BooleanField()),
                        ("metrics", models.JSONField(default=dict)),
                        ("info", models.JSONField(default=dict)),
                        ("num_steps", models.IntegerField(default=0)),
                        ("response_tokens", models.IntegerField(default=0)),
                        ("num_tool_calls", models.IntegerField(default=0)),
                        ("num_tool_errors", models.IntegerField(default=0)),
                        ("num_malformed", models.IntegerField(default=0)),
                        ("received", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="trajectories",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_trajectory",
                        "ordering": ["-training_step", "group_id", "rollout_index"],
                    },
                ),
                migrations.CreateModel(
                    name="ToolCall",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("step_index", models.IntegerField()),
                        ("position", models.IntegerField(help_text="Order of the call within its step.")),
                        ("training_step", models.IntegerField()),
                        ("name", models.CharField(blank=True, max_length=200)),
                        ("arguments", models.JSONField(null=True)),
                        ("error", models.CharField(max_length=100, null=True)),
                        ("reward", models.FloatField(null=True)),
                        ("latency_s", models.FloatField(default=0.0)),
                        ("info", models.JSONField(default=dict)),
                        (
                            "result",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="ingestion.textblob",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                        (
                            "trajectory",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="tool_calls",
                                to="ingestion.trajectory",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_toolcall",
                        "ordering": ["trajectory_id", "step_index", "position"],
                    },
                ),
                migrations.CreateModel(
                    name="TrajectoryStep",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "trajectory_id",
                                "index",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("index", models.IntegerField()),
                        ("reward", models.FloatField(null=True)),
                        ("done", models.BooleanField(default=False)),
                        ("advantage", models.FloatField(null=True)),
                        ("value", models.FloatField(null=True)),
                        ("anchor", models.CharField(max_length=200, null=True)),
                        ("num_prompt_tokens", models.IntegerField(default=0)),
                        ("num_response_tokens", models.IntegerField(default=0)),
                        ("info", models.JSONField(default=dict)),
                        ("timings", models.JSONField(default=dict)),
                        ("tokens", models.JSONField(null=True)),
                        ("token_signals", models.BinaryField(null=True)),
                        ("search", django.contrib.postgres.search.SearchVectorField(null=True)),
                        (
                            "prompt",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="ingestion.textblob",
                            ),
                        ),
                        (
                            "response",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="ingestion.textblob",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                        (
                            "trajectory",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="steps",
                                to="ingestion.trajectory",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_trajectorystep",
                        "ordering": ["trajectory_id", "index"],
                    },
                ),
                migrations.CreateModel(
                    name="PendingTokenSignals",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("trajectory_uid", models.CharField(max_length=200)),
                        ("step_index", models.IntegerField()),
                        (
                            "training_step",
                            models.IntegerField(
                                help_text="The run's newest stored training step when these arrived."
                            ),
                        ),
                        ("payload", models.JSONField(help_text="The StepSignalsWire as it arrived.")),
                        ("received", models.DateTimeField(auto_now_add=True)),
                        (
                            "run",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="experiments.run",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "results_pendingtokensignals",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("run", "trajectory_uid", "step_index"),
                                name="pending_signals_unique_per_step",
                            )
                        ],
                    },
                ),
                migrations.AddIndex(
                    model_name="trajectory",
                    index=models.Index(fields=["run", "training_step", "id"], name="traj_run_step"),
                ),
                migrations.AddIndex(
                    model_name="trajectory",
                    index=models.Index(fields=["run", "group_id"], name="traj_run_group"),
                ),
                migrations.AddIndex(
                    model_name="trajectory",
                    index=models.Index(
                        fields=["run", "sample_index", "training_step"], name="traj_run_sample"
                    ),
                ),
                migrations.AddIndex(
                    model_name="trajectory",
                    index=models.Index(fields=["run", "data_source"], name="traj_run_source"),
                ),
                migrations.AddConstraint(
                    model_name="trajectory",
                    constraint=models.UniqueConstraint(
                        fields=("run", "uid"), name="trajectory_uid_unique_per_run"
                    ),
                ),
                migrations.AddIndex(
                    model_name="toolcall",
                    index=models.Index(fields=["run", "training_step"], name="toolcall_run_step"),
                ),
                migrations.AddIndex(
                    model_name="trajectorystep",
                    index=django.contrib.postgres.indexes.GinIndex(fields=["search"], name="step_search"),
                ),
            ],
        ),
    ]
