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

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import connection, models, transaction

from trainer.contract import CheckpointRecord
from webapp.accounts.models import Team
from webapp.experiments.models import Experiment, Run

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

    def __str__(self) -> str:
        return self.name


class MetricPoint(models.Model):
    pk = models.CompositePrimaryKey("run_id", "key_id", "step")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    key = models.ForeignKey(MetricKey, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    step = models.IntegerField()
    value = models.FloatField()
    ts = models.FloatField(help_text="Unix time the trainer logged the point.")


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


class MetricLatest(models.Model):
    pk = models.CompositePrimaryKey("run_id", "key_id")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, db_constraint=False, related_name="latest_metrics")
    key = models.ForeignKey(MetricKey, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    step = models.IntegerField()
    value = models.FloatField()
    ts = models.FloatField()


class IngestBatch(models.Model):
    """Batch ids already stored: a replayed batch finds its id here and changes nothing."""

    pk = models.CompositePrimaryKey("run_id", "batch_id")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    batch_id = models.CharField(max_length=64)
    kind = models.CharField(max_length=16)
    received = models.DateTimeField(auto_now_add=True)

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
        constraints = [models.UniqueConstraint(fields=["run", "uid"], name="trajectory_uid_unique_per_run")]
        indexes = [
            models.Index(fields=["run", "training_step", "id"], name="traj_run_step"),
            models.Index(fields=["run", "group_id"], name="traj_run_group"),
            models.Index(fields=["run", "sample_index", "training_step"], name="traj_run_sample"),
            # The run's data sources for the filter forms (rollouts.data_sources skips through it).
            models.Index(fields=["run", "data_source"], name="traj_run_source"),
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
    # Per-token signals of the update (rollouts.pack_token_signals: zlib of typed arrays), for the
    # trajectories the run keeps them of (docs/rollouts.md#token-signals).
    token_signals = models.BinaryField(null=True)
    # Full-text search over the response, the tool calls' arguments and results (docs/rollouts.md#search).
    search = SearchVectorField(null=True)

    class Meta:
        ordering = ["trajectory_id", "index"]
        indexes = [GinIndex(fields=["search"], name="step_search")]


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
        indexes = [models.Index(fields=["run", "training_step"], name="toolcall_run_step")]
        ordering = ["trajectory_id", "step_index", "position"]

    @property
    def malformed(self) -> bool:
        return self.error == "malformed"


# -- retention and storage (docs/rollouts.md#retention, docs/rollouts.md#storage) ----------------------


class RetentionKind(models.TextChoices):
    ALL = "all", "keep everything"
    FAILURES = "failures", "all failures plus k successes per training step"
    SAMPLE = "sample", "a sample of the trajectories"


class RetentionSettings(models.Model):
    """Which of a run's trajectories are stored (webapp.retention.policy decides by these)."""

    retention = models.CharField(max_length=10, choices=RetentionKind.choices, default=RetentionKind.ALL)
    keep_successes = models.IntegerField(default=4, help_text="k: successes kept per training step.")
    sample_fraction = models.FloatField(default=0.1, help_text="The fraction of trajectories a sample keeps.")

    class Meta:
        abstract = True


class ExperimentRetention(RetentionSettings):
    """The policy chosen when the experiment was created: each of its runs starts with it."""

    experiment = models.OneToOneField(
        Experiment, on_delete=models.CASCADE, primary_key=True, related_name="retention"
    )


class RunStorage(RetentionSettings):
    """A run's retention policy and what its trajectories take: counters kept up to date by ingestion
    in its own transaction, set right after a retention change (webapp.ingestion.storage)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="storage")
    received = models.BigIntegerField(default=0, help_text="Trajectories that arrived (replays not counted).")
    kept = models.BigIntegerField(default=0, help_text="Trajectories stored now.")
    trajectory_bytes = models.BigIntegerField(default=0)
    step_bytes = models.BigIntegerField(default=0, help_text="The steps' rows, less their token signals.")
    token_signal_bytes = models.BigIntegerField(default=0)
    tool_call_bytes = models.BigIntegerField(default=0)
    text_bytes = models.BigIntegerField(default=0, help_text="The texts this run was first to store.")
    changed_at = models.DateTimeField(null=True, blank=True, help_text="The policy was last changed.")
    applied_at = models.DateTimeField(null=True, blank=True, help_text="... and applied to the stored data.")

    @property
    def total_bytes(self) -> int:
        return (
            self.trajectory_bytes
            + self.step_bytes
            + self.token_signal_bytes
            + self.tool_call_bytes
            + self.text_bytes
        )

    @property
    def applying(self) -> bool:
        """A change whose deletions have not run yet (the task is queued or running)."""
        return self.changed_at is not None and (self.applied_at is None or self.applied_at < self.changed_at)


class LogChunk(models.Model):
    """A chunk of the trainer's log as it sent it (numbered from 0); the run page shows their tail."""

    pk = models.CompositePrimaryKey("run_id", "seq")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_chunks")
    seq = models.IntegerField()
    text = models.TextField()
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "seq"]

    @classmethod
    def append(cls, run: Run, seq: int, text: str) -> bool:
        """Store chunk ``seq``; False when it is stored already (a replay adds nothing)."""
        # Race: the same chunk delivered twice at once; get_or_create's insert conflicts on the
        # primary key for the second and it reads the first one back instead.
        _chunk, created = cls.objects.get_or_create(run=run, seq=seq, defaults={"text": text})
        return created


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.TextField()
    metrics = models.JSONField(default=dict)
    size_bytes = models.BigIntegerField(null=True, blank=True)  # None: reported by an older trainer
    # The trainer deleted its files (trainer.keep_checkpoints, docs/checkpoints.md); the row stays so the
    # run page can say which steps were saved.
    deleted = models.BooleanField(default=False)
    received = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "step"]

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
                cls.objects.filter(run=run, step=record.step).update(deleted=True)
            else:
                cls.objects.create(
                    run=run,
                    step=record.step,
                    path=record.path,
                    metrics=dict(record.metrics),
                    size_bytes=record.size_bytes,
                )
        return True


class ReferenceResult(models.Model):
    """Published numbers shown beside ours, never mixed into them (e.g. the Agent-R1 paper)."""

    source = models.CharField(max_length=200, help_text="Where the numbers come from, shown as the label.")
    method = models.CharField(max_length=100, help_text="Algorithm or baseline as the source names it.")
    algorithm = models.CharField(max_length=50, blank=True, help_text="Our preset name when there is one.")
    task = models.CharField(max_length=100)
    metric = models.CharField(max_length=100, help_text="e.g. acc, success_seen, score.")
    value = models.FloatField(help_text="As published (percent).")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "method", "task", "metric"], name="reference_result_unique"
            )
        ]
        ordering = ["source", "task", "metric", "method"]


class LayoutKind(models.TextChoices):
    RUNS_TABLE = "runs_table", "runs table columns"
    CURVES = "curves", "curve workspace panels"


class SavedLayout(models.Model):
    """How one user arranged a page of one team or experiment: the runs table's columns, the curve
    workspace's panels. Each user keeps their own, viewers too (it changes nothing of the team's)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(
        Experiment, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=LayoutKind.choices)
    settings = models.JSONField(default=dict)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team", "experiment", "kind"],
                nulls_distinct=False,
                name="one_layout_per_scope",
            )
        ]

    @classmethod
    def load(
        cls, user: object, team: Team, experiment: Experiment | None, kind: str
    ) -> dict[str, object] | None:
        found = cls.objects.filter(user=user, team=team, experiment=experiment, kind=kind).first()
        return found.settings if found else None

    @classmethod
    def store(
        cls, user: object, team: Team, experiment: Experiment | None, kind: str, value: dict[str, object]
    ) -> None:
        # Race: two saves from two tabs; the unique constraint keeps one row and the last write wins.
        cls.objects.update_or_create(
            user=user, team=team, experiment=experiment, kind=kind, defaults={"settings": value}
        )


# -- health checks and alerts (docs/health.md) ------------------------------------------------------


class HealthRule(models.Model):
    """A team's setting for one health check (webapp.monitoring.checks.CHECKS): a row only where
    the team changed the default; no row means enabled, the check's default threshold, no stop."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="health_rules")
    check_name = models.CharField(max_length=40)
    enabled = models.BooleanField(default=True)
    threshold = models.FloatField()
    stop_run = models.BooleanField(default=False, help_text="Cancel the run when this check fires.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "check_name"], name="one_health_rule_per_check")
        ]


class AlertChannels(models.Model):
    """Where a team's alerts go besides the app: a webhook and the members' email."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="alert_channels")
    webhook_url = models.URLField(max_length=500, blank=True)
    email = models.BooleanField(default=False, help_text="Email every member who has an address.")


class RunHealth(models.Model):
    """One check's state on one run: its recent points (the window it judges) and its verdict."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="health")
    check_name = models.CharField(max_length=40)
    firing = models.BooleanField(default=False)
    since_step = models.IntegerField(null=True, help_text="The step at which the current firing began.")
    step = models.IntegerField(null=True, help_text="The step of the latest verdict.")
    value = models.FloatField(null=True)
    episodes = models.IntegerField(default=0, help_text="How many times it has started firing.")
    window = models.JSONField(default=dict, help_text="metric key -> [[step, value], ...], finite only.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "check_name"], name="one_health_row_per_check")]
        indexes = [models.Index(fields=["run"], condition=models.Q(firing=True), name="run_health_firing")]


class HealthAlert(models.Model):
    """One firing of one check on one run (an episode): alerted once, whatever the channels."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="health_alerts")
    check_name = models.CharField(max_length=40)
    episode = models.IntegerField()
    step = models.IntegerField()
    value = models.FloatField()
    threshold = models.FloatField()
    created = models.DateTimeField(auto_now_add=True)
    stopped_run = models.BooleanField(default=False)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    delivery_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "check_name", "episode"], name="one_alert_per_episode")
        ]
        ordering = ["-created", "-id"]

    @property
    def check_label(self) -> str:
        from webapp.monitoring.checks import CHECKS

        return CHECKS.get(self.check_name).label if self.check_name in CHECKS else self.check_name


class Notification(models.Model):
    """An alert in a member's in-app list."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    alert = models.ForeignKey(HealthAlert, on_delete=models.CASCADE, related_name="notifications")
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "alert"], name="one_notification_per_user")]
        indexes = [
            models.Index(fields=["user"], condition=models.Q(read_at__isnull=True), name="unread_notes")
        ]
        ordering = ["-alert__created", "-id"]
