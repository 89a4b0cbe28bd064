"""Experiments and their runs, the params and tags logged for a run, sweeps and the team's limit on
active runs. A run's life (its statuses and guarded transitions) is in
:mod:`webapp.experiments.lifecycle`, which Run inherits.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import IntegrityError, models, transaction
from django.db.models import F, Func, Q, Value
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.celery import enqueue_on_commit
from webapp.experiments.executors import (
    EXTERNAL_EXECUTOR,
    executor_of,
    outside_executors,
    reaped_executors,
)
from webapp.experiments.lifecycle import ACTIVE, STARTED, TERMINAL, RunLifecycle, RunStatus
from webapp.experiments.run_files import checkpoint_dir

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from webapp.retention.policy import Retention

RUN_NAME_MAX = 250
# The task this module queues, by name (webapp.celery.enqueue_on_commit): webapp/experiments/tasks.py
# imports this module.
LAUNCH_RUN_TASK = "webapp.experiments.tasks.launch_run"
# A launch request's key (the form's hidden field, a REST Idempotency-Key): what fits Run.launch_key.
LAUNCH_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class NameTaken(ValueError):
    """The team has an experiment of that name already."""


class Unchangeable(ValueError):
    """The experiment's config and seeds can no longer change; the message says why."""


class LaunchRefused(ValueError):
    """The experiment cannot be launched now; the message says why and what to do."""


class Experiment(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="experiments")
    # 500: MLflow's limit for experiment names, so every MLflow experiment fits (issue 8).
    name = models.CharField(max_length=500)
    description = models.TextField(blank=True)
    task = models.CharField(max_length=100, blank=True, help_text="Task / data source, e.g. gsm8k.")
    preset = models.CharField(max_length=50, blank=True, help_text="Algorithm preset, e.g. grpo.")
    # The RunConfig as JSON (trainer.config.RunConfig.to_json), without the seed: each run adds its own.
    config = models.JSONField(default=dict)
    seeds = models.JSONField(default=list, help_text="One run per seed.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)
    # Made by an MLflow client (create_external) rather than the form: it has no RunConfig to launch.
    # An experiment's origin, not its runs': an MLflow client may log a run into a launched
    # experiment, and a launched run may log through MLflow (Run.is_external says which runs are whose).
    external = models.BooleanField(default=False)
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    # A sweep's cell (docs/sweeps.md#cells): the sweep it belongs to and its place in the grid
    # ({"preset", "task", "params": {path: value}}); its runs are its seeds, as for any experiment.
    sweep = models.ForeignKey("Sweep", null=True, blank=True, on_delete=models.CASCADE, related_name="cells")
    cell = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="experiment_name_unique_per_team")
        ]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def create_external(cls, team: Team, name: str, user: Any | None) -> tuple[Experiment, bool]:
        """The team's experiment of that name, made for an MLflow client when new; True when new."""
        # Race: two clients calling set_experiment(name) at once; the unique (team, name)
        # constraint lets one create it and get_or_create hands the other the same row.
        return cls.objects.get_or_create(
            team=team, name=name, defaults={"external": True, "created_by": user}
        )

    @classmethod
    def create(
        cls,
        team: Team,
        user: Any,
        config: RunConfig,
        seeds: list[int],
        *,
        description: str = "",
        cloned_from: Experiment | None = None,
        retention: Retention | None = None,
    ) -> Experiment:
        """A new experiment of a config that webapp.experiments.acceptance.accept returned; NameTaken
        when the team has one of its name. ``retention``: the policy its runs start with
        (docs/rollouts.md#retention); None keeps a clone's source's, else everything."""
        from webapp.retention.models import ExperimentRetention
        from webapp.retention.policy import Retention

        try:
            # Race: two requests creating the same name at once; the unique (team, name) constraint
            # lets one in, and the savepoint keeps the other's transaction usable for its answer.
            with transaction.atomic():
                experiment = cls.objects.create(
                    team=team,
                    description=description,
                    seeds=seeds,
                    created_by=user,
                    cloned_from=cloned_from,
                    **_config_fields(config),
                )
                if retention is None and cloned_from is not None:  # a clone keeps its source's policy
                    earlier = ExperimentRetention.objects.filter(experiment=cloned_from).first()
                    retention = Retention.of(earlier) if earlier is not None else None
                if retention is not None:
                    ExperimentRetention.objects.create(experiment=experiment, **retention.fields())
                return experiment
        except IntegrityError:
            raise NameTaken(f"the team already has an experiment named {config.name!r}") from None

    def frozen_because(self) -> str:
        """Why its config and seeds may no longer change ("" while they may): runs keep the config they
        were launched with, and an MLflow client's experiment has none."""
        if self.external:
            return f"{self.name} was logged through MLflow: it has no config to change"
        if self.runs.exists():
            return f"{self.name} has runs: its config and seeds stay as launched; clone it"
        return ""

    def change(
        self,
        *,
        config: RunConfig | None = None,
        name: str | None = None,
        description: str | None = None,
        seeds: list[int] | None = None,
    ) -> None:
        """Save the fields given (None: unchanged); ``config`` one that accept returned. Unchangeable
        when a config or seeds are given but may no longer change; NameTaken for a name in use."""
        given = {"name": name, "description": description, "seeds": seeds}
        changes = _config_fields(config) if config is not None else {}
        changes.update({field: value for field, value in given.items() if value is not None})
        try:
            with transaction.atomic():
                # Race: a launch while the config changes; the row lock (launch takes it too) orders
                # them, so no run starts from a config that then changes under its experiment.
                Experiment.objects.select_for_update().filter(pk=self.pk).first()
                frozen = self.frozen_because() if config is not None or seeds is not None else ""
                if frozen:
                    raise Unchangeable(frozen)
                # Race: a rename to a name another request takes at once; the unique (team, name)
                # constraint lets one in, and the savepoint keeps the other's transaction usable.
                Experiment.objects.filter(pk=self.pk).update(**changes)
        except IntegrityError:
            raise NameTaken(f"the team already has an experiment named {changes.get('name')!r}") from None
        self.refresh_from_db()

    @transaction.atomic
    def launch(self, launch_key: str = "") -> Launched:
        """One queued run per seed, each with its own frozen config, the launch tasks sent on commit;
        at most once per ``launch_key`` (the same key again returns its runs). The stored config is
        accepted again (acceptance.Refused): a dataset deleted or re-mapped since, or a rule newer
        than the config, stops it before any run is made. LaunchRefused while runs of the same
        seeds are still active (docs/reliability.md#launch)."""
        from webapp.experiments.acceptance import accept

        # Race: two launches of one experiment at once (a double-click, two REST calls): the row lock
        # makes the second wait for the first to commit, and then see its runs.
        Experiment.objects.select_for_update().filter(pk=self.pk).first()
        if launch_key:
            earlier = list(self.runs.filter(launch_key=launch_key).order_by("pk"))
            if earlier:
                return Launched(earlier, replayed=True)
        base = accept(self.team, self.config)
        seeds = self.seeds or [base.trainer.seed]
        launched = self.runs.filter(executor__in=reaped_executors())  # not those reported from outside
        active = launched.filter(status__in=ACTIVE, seed__in=seeds, kind__in=LAUNCHED_KINDS)
        busy = sorted(set(active.values_list("seed", flat=True)))
        if busy:
            raise LaunchRefused(
                f"this experiment still has runs queued or running for seed(s) {', '.join(map(str, busy))}: "
                "wait for them to end, or cancel them, before launching it again"
            )
        return Launched([self._queue_run(base, seed, launch_key) for seed in seeds], replayed=False)

    def _queue_run(self, base: RunConfig, seed: int, launch_key: str) -> Run:
        suffix = f" · seed {seed}"
        start = base.start_from
        run = Run.objects.create(
            experiment=self,
            team=self.team,
            seed=seed,
            executor=base.executor,
            name=self.name[: RUN_NAME_MAX - len(suffix)] + suffix,
            launch_key=launch_key,
            kind=RunKind.SFT if base.sft.enabled else RunKind.TRAINING,
            # accept() resolved start_from to a checkpoint of this team's run (and its step)
            started_from_id=start.run,
            started_from_step=start.step,
        )
        config = base.with_overrides(**{"trainer.seed": seed, "trainer.checkpoint_dir": checkpoint_dir(run)})
        run.freeze_config(json.loads(config.to_json()))
        run.enqueue()
        enqueue_on_commit(LAUNCH_RUN_TASK, run.pk)
        return run


def _config_fields(config: RunConfig) -> dict[str, Any]:
    """What an experiment stores of its config: the config itself and what lists and filters read."""
    return {
        "config": json.loads(config.to_json()),
        "name": config.name,
        "task": config.task,
        "preset": config.preset,
    }


@dataclass(frozen=True)
class Launched:
    runs: list[Run]
    replayed: bool  # the same launch key came before: these are its runs, nothing new was made


class RunKind(models.TextChoices):
    """What a run does. An evaluation is a run (docs/evaluations.md#an-evaluation-is-a-run): it is
    launched, claimed, reaped and cancelled as any run, and reports logs, metrics and trajectories
    through the same contract, so every page that reads a run reads it."""

    TRAINING = "training"
    EVALUATION = "evaluation"
    SFT = "sft"  # supervised fine-tuning on demonstrations (docs/sft.md#the-sft-stage)


# The kinds that train weights an experiment launches (an evaluation only scores them).
LAUNCHED_KINDS = (RunKind.TRAINING, RunKind.SFT)


REFUSAL_MESSAGE_MAX = 1000


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_mlflow_run_id() -> str:
    return uuid.uuid4().hex


MAX_LABEL_LENGTH = 64


class RunQuerySet(models.QuerySet["Run"]):
    """Changes the user makes to many runs at once from the runs table. None of them touches the
    run's life (status, executor): an archived run keeps training."""

    def archive(self) -> int:
        # Race: none worth a guard; archiving twice keeps the first time.
        return self.filter(archived_at__isnull=True).update(archived_at=timezone.now())

    def restore(self) -> int:
        return self.filter(archived_at__isnull=False).update(archived_at=None)

    def add_label(self, label: str) -> int:
        # Race: two requests adding the same tag; the filter in the same UPDATE keeps it once.
        appended = Func(F("labels"), Value(label, models.CharField()), function="array_append")
        return self.exclude(labels__contains=[label]).update(labels=appended)

    def remove_label(self, label: str) -> int:
        removed = Func(F("labels"), Value(label, models.CharField()), function="array_remove")
        return self.filter(labels__contains=[label]).update(labels=removed)

    def delete_finished(self) -> tuple[int, int]:
        """Delete these runs with everything they produced, except active ones (their trainer still
        reports: cancel first). Returns (runs deleted, runs left because active)."""
        active = self.filter(status__in=ACTIVE).count()
        # Race: a draft launched while this runs is queued by then and the DELETE skips it; its
        # launch task finds no run if the DELETE won.
        _total, per_model = self.exclude(status__in=ACTIVE).delete()
        return per_model.get(Run._meta.label, 0), active


class Run(RunLifecycle):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=250, blank=True)
    seed = models.IntegerField(default=0)
    config = models.JSONField(default=dict, help_text="The frozen RunConfig this run trains with.")
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    # The launch request the run came from (the form's hidden key, a REST Idempotency-Key): the same
    # request sent twice finds its runs instead of making new ones (docs/reliability.md#launch).
    launch_key = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # The run's id on the MLflow-compatible endpoint; launched runs have one too, so a trainer that
    # logs through MLflow (verl's MLFLOW_RUN_ID) attaches to its own run.
    mlflow_run_id = models.CharField(max_length=32, unique=True, default=new_mlflow_run_id, editable=False)
    # The user's own bookkeeping (the runs table): never read by the executor or the reaper.
    labels = ArrayField(
        models.CharField(max_length=MAX_LABEL_LENGTH), default=list, blank=True, help_text="The run's tags."
    )
    note = models.TextField(blank=True)
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="Archived runs are hidden from the runs table by default."
    )

    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.TRAINING, db_index=True)
    # An evaluation's model: the checkpoint of evaluated_step of this run, or (none) the experiment's
    # base model. The checkpoint's folder is in the frozen config (evaluation.checkpoint).
    evaluated_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    evaluated_step = models.IntegerField(null=True, blank=True)
    # The run whose checkpoint of started_from_step this run's weights started from (config
    # start_from.run and .step, docs/sft.md#start-from): the lineage the runs table and run page show.
    started_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="started_runs"
    )
    started_from_step = models.IntegerField(null=True, blank=True)

    refused_records = models.IntegerField(
        default=0, help_text="Reports of the trainer the server refused (4xx); the trainer dropped them."
    )
    last_refusal = models.TextField(blank=True, help_text="Why the server refused the last one.")

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        indexes = [
            # The runs table's first page and its count, per team and per experiment, newest first;
            # archived runs are left out of the table unless asked for.
            models.Index(
                fields=["team", "-created", "-id"],
                name="run_team_created",
                condition=Q(archived_at__isnull=True),
            ),
            models.Index(
                fields=["experiment", "-created", "-id"],
                name="run_experiment_created",
                condition=Q(archived_at__isnull=True),
            ),
            GinIndex(fields=["labels"], name="run_labels"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["experiment", "seed", "launch_key"],
                condition=~Q(launch_key=""),
                name="one_run_per_seed_and_launch_key",
            )
        ]

    def __str__(self) -> str:
        return self.name or f"run {self.pk}"

    @property
    def is_evaluation(self) -> bool:
        return self.kind == RunKind.EVALUATION

    @property
    def is_judged(self) -> bool:
        """Whether the RL health checks judge it: an evaluation makes no update and an SFT run has no
        reward (docs/health.md#at-ingestion)."""
        return self.kind == RunKind.TRAINING

    @property
    def is_external(self) -> bool:
        """Reported from outside (an MLflow client, an import), not launched by us: its executor
        is not reaped, and its status is whatever the client reports."""
        return not executor_of(self).reaped

    @classmethod
    def create_external(cls, experiment: Experiment, name: str, started_at: Any | None) -> Run:
        """A run an MLflow client creates: running from the start, named ``run-<id>`` if unnamed."""
        now = timezone.now()
        run = cls.objects.create(
            experiment=experiment,
            team=experiment.team,
            executor=EXTERNAL_EXECUTOR,
            status=RunStatus.RUNNING,
            name=name,
            started_at=started_at or now,
            heartbeat_at=now,
            progress_at=now,
        )
        if not name:
            run.rename(f"run-{run.pk}")  # the id is known only once the row exists
        return run

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    def set_details(self, *, name: str, note: str, labels: list[str]) -> None:
        """The user's name, note and tags for the run (the run page's form)."""
        unique = list(dict.fromkeys(labels))
        Run.objects.filter(pk=self.pk).update(name=name, note=note, labels=unique)
        self.name, self.note, self.labels = name, note, unique

    def issue_token(self) -> str:
        """A fresh per-run API token; only its hash is stored, so call it when launching."""
        token = f"r{self.pk}_{secrets.token_urlsafe(32)}"
        Run.objects.filter(pk=self.pk).update(token_hash=hash_token(token))
        self.token_hash = hash_token(token)
        return token

    @classmethod
    def for_token(cls, token: str) -> Run | None:
        """The run whose token this is, while the run lives: the token dies with the run, so a
        finished run's token can change nothing (docs/security.md#run-tokens)."""
        if not token:
            return None
        live = cls.objects.filter(token_hash=hash_token(token)).exclude(status__in=TERMINAL)
        return live.select_related("team", "experiment").first()

    def note_refused(self, message: str) -> None:
        """The server refused something the run's trainer sent (a 4xx): counted on the run, whose page
        shows it, while the trainer drops that record and sends the rest (docs/security.md#refusals)."""
        # Race: concurrent refusals; the increment happens in the UPDATE, so none is lost.
        Run.objects.filter(pk=self.pk).update(
            refused_records=F("refused_records") + 1, last_refusal=message[:REFUSAL_MESSAGE_MAX]
        )

    def update_from_mlflow(self, status: str | None, finished_at: Any, name: str | None) -> None:
        """An MLflow update-run. Only external runs take its status and end time: a launched run's
        state belongs to its executor and the reaper, so a trainer's MLflow end_run must not move it."""
        if name:
            self.rename(name)
        changes: dict[str, Any] = {}
        if status:
            changes["status"] = status
        if finished_at is not None:
            changes["finished_at"] = finished_at
        if changes:
            # Race: none to guard between MLflow writers (last write wins, as on MLflow); the
            # executor filter is what keeps a launched run's state machine out of reach.
            Run.objects.filter(pk=self.pk, executor__in=outside_executors()).update(**changes)
        self.refresh_from_db()

    def rename(self, name: str) -> None:
        Run.objects.filter(pk=self.pk).update(name=name)
        self.name = name


class LoggedKind(models.TextChoices):
    PARAM = "param"
    TAG = "tag"


class LoggedQuerySet(models.QuerySet["LoggedValue"]):
    def params(self) -> LoggedQuerySet:
        return self.filter(kind=LoggedKind.PARAM)

    def tags(self) -> LoggedQuerySet:
        return self.filter(kind=LoggedKind.TAG)


class LoggedValue(models.Model):
    """A param or a tag an MLflow client logged for a run (``run.logged.params()``). A param is logged
    once: a different value for the same key is refused, as on MLflow; a tag set again takes the new
    value. The run name is kept on Run.name, not here."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="logged")
    kind = models.CharField(max_length=5, choices=LoggedKind.choices)
    key = models.CharField(max_length=250)
    value = models.TextField()

    objects = LoggedQuerySet.as_manager()

    class Meta:
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(fields=["run", "kind", "key"], name="one_value_per_run_kind_key")
        ]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"

    @classmethod
    def log_params(cls, run: Run, params: dict[str, str]) -> list[tuple[str, str, str]]:
        """Store new params; (key, stored value, refused value) of each param logged before with
        another value, which keeps its first value (params are logged once, as on MLflow)."""
        if not params:
            return []
        cls.objects.bulk_create(
            [cls(run=run, kind=LoggedKind.PARAM, key=key, value=value) for key, value in params.items()],
            ignore_conflicts=True,
        )
        # Read back after the insert: a concurrent writer's value for the same key is seen here.
        stored = dict(run.logged.params().filter(key__in=list(params)).values_list("key", "value"))
        return [(key, stored[key], value) for key, value in params.items() if stored.get(key) != value]

    @classmethod
    def set_tags(cls, run: Run, tags: dict[str, str]) -> None:
        """Set tags; a tag set again takes the new value."""
        if tags:
            cls.objects.bulk_create(
                [cls(run=run, kind=LoggedKind.TAG, key=key, value=value) for key, value in tags.items()],
                update_conflicts=True,
                unique_fields=["run", "kind", "key"],
                update_fields=["value"],
            )


# --- sweeps and the team's limit on active runs (docs/sweeps.md) ---------------------------------

MAX_ACTIVE_LIMIT = 64


class TeamRunLimit(models.Model):
    """How many of the team's local runs may be started at once; without a row, STUDIO_MAX_ACTIVE_RUNS."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="run_limit")
    max_active = models.PositiveSmallIntegerField(
        help_text="Local runs started at once; the rest wait queued."
    )

    def __str__(self) -> str:
        return f"{self.team}: {self.max_active}"

    @staticmethod
    def of(team_id: int) -> int:
        row = TeamRunLimit.objects.filter(team_id=team_id).values_list("max_active", flat=True).first()
        return row if row is not None else settings.MAX_ACTIVE_RUNS

    @staticmethod
    def set(team: Team, max_active: int) -> None:
        # Race: two owners saving at once; the last write wins, as for any setting.
        TeamRunLimit.objects.update_or_create(team=team, defaults={"max_active": max_active})


class Sweep(models.Model):
    """One launch over a grid: each cell (presets x tasks x up to two hyperparameters) is an
    experiment whose runs are the sweep's seeds (docs/sweeps.md). Its status is its runs'."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="sweeps")
    name = models.CharField(max_length=200)
    # The grid as sent (webapp.experiments.sweeps.SweepSpec): base config, axes, seeds.
    spec = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="sweep_name_unique_per_team")]

    def __str__(self) -> str:
        return self.name

    def runs(self) -> models.QuerySet[Run]:
        return Run.objects.filter(experiment__sweep=self)

    @property
    def status(self) -> str:
        """Derived from its runs: active while any is, else failed/cancelled if any did, else succeeded."""
        statuses = set(self.runs().values_list("status", flat=True))
        if not statuses:
            return RunStatus.DRAFT
        if statuses & set(STARTED):
            return RunStatus.RUNNING
        for status in (RunStatus.QUEUED, RunStatus.FAILED, RunStatus.CANCELLED):
            if status in statuses:
                return status
        return RunStatus.SUCCEEDED


# A model of this app kept in a module of its own (long work handed to workers, docs/api.md#jobs).
from webapp.experiments.jobs import Job  # noqa: E402, F401
