"""What the run page shows at a glance: timing (duration, ETA), the latest and best reward and
validation accuracy, a summary of the config, and the checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from trainer.config import flatten_paths
from trainer.contract import REWARD_MEAN, SFT_LOSS, VAL_LOSS, VAL_PREFIX, val_key
from webapp.experiments.models import Run, RunKind, RunStatus
from webapp.ingestion.models import SUMMARY_WIDTHS, Checkpoint
from webapp.results.runs_table import format_duration

# The config values a reader of the run page asks about first, in this order.
REWARD_RULE_PATH = "data.reward_rule"
SUMMARY_PATHS = (
    "task",
    "preset",
    "model.path",
    "algorithm.estimator",
    "algorithm.policy_loss",
    "algorithm.kl_coef",
    "rollout.n",
    "rollout.max_steps",
    "trainer.batch_size",
    "trainer.total_steps",
    "optim.lr",
    "backend",
    REWARD_RULE_PATH,
)
# An SFT run's (docs/sft.md#the-sft-stage): no rollouts, estimator or reward rule are used.
SFT_SUMMARY_PATHS = (
    "task",
    "model.path",
    "sft.train_turns",
    "sft.max_length",
    "trainer.batch_size",
    "trainer.total_steps",
    "optim.lr",
    "optim.warmup_steps",
    "model.lora_rank",
    "backend",
)


@dataclass(frozen=True)
class Timing:
    duration_s: float | None
    eta_s: float | None  # only while running, from the pace so far


def timing(
    started: datetime | None,
    finished: datetime | None,
    step: int,
    total_steps: int,
    running: bool,
    now: datetime,
) -> Timing:
    """Duration from start to end (or to now); ETA = the time per step so far x the steps left."""
    if started is None:
        return Timing(None, None)
    duration = ((finished or now) - started).total_seconds()
    eta = None
    if running and finished is None and 0 < step < total_steps:
        eta = duration / step * (total_steps - step)
    return Timing(max(duration, 0.0), eta)


@dataclass
class MetricFact:
    key: str
    latest: float | None = None
    latest_step: int | None = None
    best: float | None = None
    best_step: int | None = None


@dataclass
class RunSummary:
    timing: Timing
    reward: MetricFact
    validation: MetricFact | None
    config: list[tuple[str, str]] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @property
    def reward_rule(self) -> str:
        """The rule verl's data sources were scored by (docs/rewards.md#verl-and-lenient-rules), "" if none."""
        return dict(self.config).get(REWARD_RULE_PATH, "")

    @property
    def duration(self) -> str:
        return format_duration(self.timing.duration_s) if self.timing.duration_s is not None else "—"

    @property
    def eta(self) -> str:
        return format_duration(self.timing.eta_s) if self.timing.eta_s is not None else ""


def summarize(run: Run) -> RunSummary:
    task = str((run.config or {}).get("task") or run.experiment.task or "")
    logged = _latest(run)
    validation_key = (
        val_key(task)
        if task
        else next((k for k in sorted(logged) if k.startswith(VAL_PREFIX) and k.endswith("/acc")), None)
    )
    keys = [REWARD_MEAN] + ([validation_key] if validation_key else [])
    sft = run.kind == RunKind.SFT  # an SFT run has no reward: its losses, lowest best (docs/sft.md#metrics)
    if sft:
        keys, validation_key = [SFT_LOSS, VAL_LOSS], VAL_LOSS
    best = _best(run, keys, lowest=sft)
    facts = {
        key: MetricFact(key, *logged.get(key, (None, None)), *best.get(key, (None, None))) for key in keys
    }
    running = run.status in (RunStatus.RUNNING, RunStatus.STALLED)
    if validation_key and not _validates(run, logged, validation_key):
        validation_key = None
    return RunSummary(
        timing=timing(run.started_at, run.finished_at, run.step, run.total_steps, running, timezone.now()),
        reward=facts[keys[0]],
        validation=facts[validation_key] if validation_key else None,
        config=config_summary(run.config or {}, SFT_SUMMARY_PATHS if sft else SUMMARY_PATHS),
        checkpoints=list(run.checkpoints.order_by("step")),
    )


def _validates(run: Run, logged: dict[str, Any], key: str) -> bool:
    """Whether the page has a validation figure to show or wait for: one was logged, or the run's
    config names a validation split (a run trained without one never logs it)."""
    data = (run.config or {}).get("data")
    return key in logged or not isinstance(data, dict) or bool(data.get("val_path"))


def config_summary(config: dict[str, Any], paths: tuple[str, ...] = SUMMARY_PATHS) -> list[tuple[str, str]]:
    flat = flatten_paths(config)
    return [(path, _shown(flat[path])) for path in paths if path in flat and flat[path] not in (None, "")]


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "—"
    return str(value)


def _latest(run: Run) -> dict[str, tuple[float, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT k.name, l.value, l.step FROM results_metriclatest l JOIN results_metrickey k ON k.id = l.key_id "
            "WHERE l.run_id = %s",
            [run.pk],
        )
        return {name: (value, step) for name, value, step in cursor.fetchall()}


def _best(run: Run, keys: list[str], *, lowest: bool = False) -> dict[str, tuple[float, int]]:
    """The maximum (``lowest``: the minimum, for a loss) of each key over every step and where it was,
    from the coarsest summary level."""
    value, step, order = ("min_value", "min_step", "ASC") if lowest else ("max_value", "max_step", "DESC")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT ON (k.name) k.name, s.{value}, s.{step} FROM results_metricsummary s "
            "JOIN results_metrickey k ON k.id = s.key_id WHERE s.run_id = %s AND s.level = %s AND k.name = ANY(%s) "
            f"ORDER BY k.name, s.{value} {order}, s.{step}",
            [run.pk, len(SUMMARY_WIDTHS), keys],
        )
        return {name: (value, step) for name, value, step in cursor.fetchall()}
