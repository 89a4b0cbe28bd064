"""What a run produces: metric points, trajectories and their steps, tool calls, logs, checkpoints.

Metric points are append-only rows keyed on (run, key, step) — no surrogate id, so the table and
its one index stay narrow for COPY. Beside them: a latest-value table for list pages and min/max
summaries at a few resolutions (``SUMMARY_WIDTHS``) kept up to date as points arrive, so a curve of
a million points is drawn from a few thousand summary rows (docs/benchmarks.md#curve-queries). The
SQL that writes and reads them lives in :mod:`webapp.ingestion.metrics_store`.

The foreign keys of the high-volume tables carry no database constraint: Postgres would fire one
referential-integrity trigger per COPY row. The ingestion API checks the run once per request and
Django's collector still cascades deletes (one DELETE per table).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import connection, models, transaction

from trainer.contract import CheckpointRecord
from webapp.experiments.models import Run

# Widths (in steps) of the min/max summary levels; level i has width SUMMARY_WIDTHS[i - 1]. A factor of
# 8 between levels keeps a curve read under ~8 x 490 summary rows whatever the zoom (measured:
# ~1.6 µs per row aggregated), at one more small upsert per batch than a factor of 16.
SUMMARY_WIDTHS: tuple[int, ...] = (16, 128, 1024, 8192)

# Text shorter than this is never worth a zlib header and a decompress on read.
COMPRESS_MIN_BYTES = 256
# Keep the compressed form only when it saves at least this fraction.
COMPRESS_MIN_SAVING = 0.1


class MetricKey(models.Model):
    """Dictionary of metric names, so the point table stores a 4-byte id instead of the text."""

    id = models.AutoField(primary_key=True)
    name = models.CharField(max_length=250, unique=True)  # 250: MLflow metric keys fit

    class Meta:
        db_table = "results_metrickey"

    def __str__(self) -> str:
        return self.name


class MetricPoint(models.Model):
    pk = models.CompositePrimaryKey("run_id", "key_id", "step")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    key = models.ForeignKey(MetricKey, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    step = models.IntegerField()
    value = models.FloatField()
    ts = models.FloatField(help_text="Unix time the trainer logged the point.")

    class Meta:
        db_table = "results_metricpoint"


class MetricSummary(models.Model):
    """Min and max (with the step and time where they occur) of one bucket of one series."""

    pk = models.CompositePrimaryKey("run_id", "key_id", "level", "bucket")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    key = models.ForeignKey(MetricKey, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    level = models.SmallIntegerField()
    bucket = models.IntegerField(help_text="step // width of the level")
    n = models.IntegerField()
    min_value = models.FloatField()
    min_step = models.IntegerField()
    min_ts = models.FloatField()
    max_value = models.FloatField()
    max_step = models.IntegerField()
    max_ts = models.FloatField()

    class Meta:
        db_table = "results_metricsummary"


class MetricLatest(models.Model):
    pk = models.CompositePrimaryKey("run_id", "key_id")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="latest_metrics")
    key = models.ForeignKey(MetricKey, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    step = models.IntegerField()
    value = models.FloatField()
    ts = models.FloatField()
    # For the keys metrics_store.TOTALLED (generated tokens), the sum of the key's values over every
    # step, NaN and +Infinity left out, kept as points arrive: a run's generated tokens are read from
    # one row, not from every point. None for other keys, or without such a value.
    total = models.FloatField(null=True)

    class Meta:
        db_table = "results_metriclatest"


class IngestBatch(models.Model):
    """Batch ids already stored: a replayed batch finds its id here and changes nothing."""

    pk = models.CompositePrimaryKey("run_id", "batch_id")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    batch_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "results_ingestbatch"

    @staticmethod
    def claim(run_id: int, batch_id: str, kind: str) -> bool:
        """Record the batch id; False when it was already stored (a replay)."""
        with connection.cursor() as cursor:
            # Race: the same batch delivered twice at once (a client retry after a timeout); the
            # second insert waits on the primary key until the first commits, then does nothing.
            # One round trip on the ingestion hot path, hence SQL: the ORM's insert cannot say
            # whether ON CONFLICT skipped the row.
            cursor.execute(
                "INSERT INTO results_ingestbatch (run_id, batch_id, kind, received) VALUES (%s, %s, %s, now()) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                [run_id, batch_id, kind],
            )
            return cursor.fetchone() is not None


class TextBlob(models.Model):
    """A piece of model or tool text stored once by content hash; zlib-compressed when that pays."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    data = models.BinaryField()
    compressed = models.BooleanField(default=False)
    size = models.IntegerField(help_text="Length of the text in UTF-8 bytes.")

    class Meta:
        db_table = "results_textblob"

    @staticmethod
    def digest(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @staticmethod
    def encode(text: str) -> tuple[bytes, bool]:
        raw = text.encode("utf-8")
        if len(raw) < COMPRESS_MIN_BYTES:
            return raw, False
        packed = zlib.compress(raw, 6)
        if len(packed) <= len(raw) * (1 - COMPRESS_MIN_SAVING):
            return packed, True
        return raw, False

    @property
    def text(self) -> str:
        data = bytes(self.data)
        return (zlib.decompress(data) if self.compressed else data).decode("utf-8")

    @classmethod
    def store_many(cls, texts: Iterable[str]) -> dict[str, str]:
        """Store every distinct text once; returns {text: sha256}."""
        return cls.store_new(texts)[0]

    @classmethod
    def store_new(cls, texts: Iterable[str]) -> tuple[dict[str, str], list[str]]:
        """:meth:`store_many`, and the hashes of the texts that were not stored before (a run's
        storage counts the texts it was first to bring, docs/rollouts.md#storage)."""
        hashes = {text: cls.digest(text) for text in set(texts)}
        rows = sorted((sha, *cls.encode(text), len(text.encode("utf-8"))) for text, sha in hashes.items())
        if not rows:
            return hashes, []
        shas, data, compressed, sizes = (list(column) for column in zip(*rows, strict=True))
        with connection.cursor() as cursor:
            # Race: two batches carrying the same text insert it at once; the second waits for the
            # first and skips it (the content is the same). Inserting in hash order keeps two batches
            # with several texts in common from waiting on each other in a circle.
            cursor.execute(
                f"""INSERT INTO {cls._meta.db_table} (sha256, data, compressed, size)
                SELECT * FROM unnest(%s::varchar[], %s::bytea[], %s::bool[], %s::int[]) ORDER BY 1
                ON CONFLICT DO NOTHING RETURNING sha256""",
                [shas, data, compressed, sizes],
            )
            return hashes, [row[0] for row in cursor.fetchall()]

    @classmethod
    def texts_for(cls, hashes: Iterable[str]) -> dict[str, str]:
        return {blob.sha256: blob.text for blob in cls.objects.filter(sha256__in=set(hashes))}


class Trajectory(models.Model):
    # The three rollout tables are partitioned by run (docs/rollouts.md#partitioning): the database's
    # keys hold run_id too, and no foreign key into or out of them has a database constraint.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="trajectories")
    uid = models.CharField(max_length=200, help_text="The trainer's trajectory id; unique in its run.")
    group_id = models.CharField(max_length=200, help_text="Prompt uid shared by the n samples of one prompt.")
    sample_index = models.IntegerField(help_text="Dataset row (extra_info.index).")
    rollout_index = models.IntegerField(default=0)
    training_step = models.IntegerField()
    data_source = models.CharField(max_length=100, blank=True)
    ground_truth = models.JSONField(null=True)
    total_reward = models.FloatField()
    success = models.BooleanField()
    metrics = models.JSONField(default=dict)
    info = models.JSONField(default=dict)
    num_steps = models.IntegerField(default=0)
    response_tokens = models.IntegerField(default=0)
    num_tool_calls = models.IntegerField(default=0)
    num_tool_errors = models.IntegerField(default=0)
    num_malformed = models.IntegerField(default=0)
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "results_trajectory"
        constraints = [models.UniqueConstraint(fields=["run", "uid"], name="trajectory_uid_unique_per_run")]
        indexes = [
            models.Index(fields=["run", "training_step", "id"], name="traj_run_step"),
            models.Index(fields=["run", "group_id"], name="traj_run_group"),
            models.Index(fields=["run", "sample_index", "training_step"], name="traj_run_sample"),
            # The run's data sources for the filter forms (rollouts.viewer.data_sources skips through it).
            models.Index(fields=["run", "data_source"], name="traj_run_source"),
            # A review queue of a run's lowest (or highest) rewards reads its first rows from here
            # instead of sorting every trajectory of the run (docs/annotations.md#how-fast).
            models.Index(fields=["run", "total_reward", "id"], name="traj_run_reward"),
        ]
        ordering = ["-training_step", "group_id", "rollout_index"]

    def __str__(self) -> str:
        return self.uid

    def own_steps(self) -> models.QuerySet[TrajectoryStep]:
        """Its steps, read from its run's partition only (docs/rollouts.md#partitioning)."""
        return self.steps.filter(run_id=self.run_id)

    def own_tool_calls(self) -> models.QuerySet[ToolCall]:
        """Its tool calls, read from its run's partition only (docs/rollouts.md#partitioning)."""
        return self.tool_calls.filter(run_id=self.run_id)


class TrajectoryStep(models.Model):
    pk = models.CompositePrimaryKey("trajectory_id", "index")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="steps"
    )
    # The partition key (the trajectory's run): a run's steps sit in one partition.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    index = models.IntegerField()
    prompt = models.ForeignKey(TextBlob, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    response = models.ForeignKey(TextBlob, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    reward = models.FloatField(null=True)
    done = models.BooleanField(default=False)
    advantage = models.FloatField(null=True)
    value = models.FloatField(null=True)
    anchor = models.CharField(max_length=200, null=True)
    num_prompt_tokens = models.IntegerField(default=0)
    num_response_tokens = models.IntegerField(default=0)
    info = models.JSONField(default=dict)
    timings = models.JSONField(default=dict)
    # prompt_ids, response_ids, response_mask, rollout_log_probs when the trainer sent them.
    tokens = models.JSONField(null=True)
    # Per-token signals of the update (token_signals.pack_token_signals: zlib of typed arrays), for the
    # trajectories the run keeps them of (docs/rollouts.md#token-signals).
    token_signals = models.BinaryField(null=True)
    # Full-text search over the response, the tool calls' arguments and results (docs/rollouts.md#search).
    search = SearchVectorField(null=True)

    class Meta:
        db_table = "results_trajectorystep"
        ordering = ["trajectory_id", "index"]
        indexes = [GinIndex(fields=["search"], name="step_search")]


class StepValues(models.Model):
    """Each distinct value of one measure (webapp.ingestion.measures) among a training step's
    trajectories, ascending, with how many have it; values a histogram cannot bin left out, no row for
    a step without any. Kept with the trajectories (webapp.ingestion.step_values) so the heat-map of a
    run reads a row per step, not every trajectory (docs/rollouts.md#histograms)."""

    pk = models.CompositePrimaryKey("run_id", "measure", "training_step")
    # The primary key's first column: no index of its own.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    measure = models.CharField(max_length=20)
    training_step = models.IntegerField()
    values = ArrayField(models.FloatField())
    counts = ArrayField(models.IntegerField())

    class Meta:
        db_table = "results_stepvalues"


class PendingTokenSignals(models.Model):
    """Per-token signals that arrived before their trajectory (verl sends them from its driver once the
    advantages exist, the trajectory comes from a rollout worker): written onto the step when the
    trajectory is stored, deleted when retention drops it (docs/rollouts.md#token-signals)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    trajectory_uid = models.CharField(max_length=200)
    step_index = models.IntegerField()
    training_step = models.IntegerField(help_text="The run's newest stored training step when these arrived.")
    payload = models.JSONField(help_text="The StepSignalsWire as it arrived.")
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "results_pendingtokensignals"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "trajectory_uid", "step_index"], name="pending_signals_unique_per_step"
            )
        ]


class ToolCall(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="tool_calls"
    )
    step_index = models.IntegerField()
    position = models.IntegerField(help_text="Order of the call within its step.")
    training_step = models.IntegerField()
    name = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(null=True)
    result = models.ForeignKey(TextBlob, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    error = models.CharField(max_length=100, null=True)
    reward = models.FloatField(null=True)
    latency_s = models.FloatField(default=0.0)
    info = models.JSONField(default=dict)

    class Meta:
        db_table = "results_toolcall"
        indexes = [models.Index(fields=["run", "training_step"], name="toolcall_run_step")]
        ordering = ["trajectory_id", "step_index", "position"]

    @property
    def malformed(self) -> bool:
        return self.error == "malformed"


class LogChunk(models.Model):
    """A chunk of the trainer's log as it sent it (numbered from 0); the run page shows their tail."""

    pk = models.CompositePrimaryKey("run_id", "seq")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_chunks")
    seq = models.IntegerField()
    text = models.TextField()
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "results_logchunk"
        ordering = ["run_id", "seq"]

    @classmethod
    def append(cls, run: Run, seq: int, text: str) -> bool:
        """Store chunk ``seq``; False when it is stored already (a replay adds nothing)."""
        # Race: the same chunk delivered twice at once; get_or_create's insert conflicts on the
        # primary key for the second and it reads the first one back instead.
        _chunk, created = cls.objects.get_or_create(run=run, seq=seq, defaults={"text": text})
        return created


MAX_CHECKPOINT_TAG = 40
TRAINER_DELETED = "the trainer (trainer.keep_checkpoints)"
POLICY_DELETED = "the keep-policy"  # followed by the policy in words (docs/checkpoints.md#keep-policies)


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.TextField()
    metrics = models.JSONField(default=dict)
    size_bytes = models.BigIntegerField(null=True, blank=True)  # None: reported by an older trainer
    # The trainer deleted its files (trainer.keep_checkpoints, docs/checkpoints.md); the row stays so the
    # run page can say which steps were saved.
    deleted = models.BooleanField(default=False)
    # Who deleted it, in words: the trainer (trainer.keep_checkpoints) or the experiment's keep-policy
    # (docs/checkpoints.md#keep-policies); "" while it is kept.
    deleted_by = models.CharField(max_length=200, blank=True)
    # The team's own marks on the registry page ("best", "candidate"): docs/checkpoints.md#the-registry.
    tags = ArrayField(models.CharField(max_length=MAX_CHECKPOINT_TAG), default=list, blank=True)
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "results_checkpoint"
        ordering = ["run_id", "step"]

    def change_tags(self, *, add: str = "", remove: str = "") -> list[str]:
        """Add and/or remove one tag (docs/checkpoints.md#the-registry); the tags it has now."""
        with transaction.atomic():
            # Race: two members tagging the same checkpoint at once; the row lock orders them, so
            # neither change is lost.
            locked = Checkpoint.objects.select_for_update().get(pk=self.pk)
            tags = [tag for tag in locked.tags if tag != remove]
            if add and add not in tags:
                tags.append(add)
            Checkpoint.objects.filter(pk=self.pk).update(tags=tags)
        self.tags = tags
        return tags

    @classmethod
    def record(cls, run: Run, batch_id: str, record: CheckpointRecord) -> bool:
        """Record a saved checkpoint, or mark the one of that step deleted, once per batch id; False
        for a replay."""
        with transaction.atomic():
            if not IngestBatch.claim(run.pk, batch_id, "checkpoints"):
                return False
            if record.deleted:
                # Race: none; the trainer reports a step's deletion only after its save was posted, and
                # one trainer's batches arrive in order.
                cls.objects.filter(run=run, step=record.step, deleted=False).update(
                    deleted=True, deleted_by=TRAINER_DELETED
                )
            else:
                cls.objects.create(
                    run=run,
                    step=record.step,
                    path=record.path,
                    metrics=dict(record.metrics),
                    size_bytes=record.size_bytes,
                )
        return True
