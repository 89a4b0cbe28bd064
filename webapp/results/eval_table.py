"""The evaluation comparison of one experiment: a row per split, a column per evaluated model (the
base model, then each run's checkpoints by step), each cell the latest evaluation of that model on
that split, so base and trained sit side by side (docs/evaluations.md#comparing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.contract import EVAL_ACC, EVAL_K, EVAL_PASS_AT_1, EVAL_PASS_AT_K, EVAL_REWARD_MEAN
from webapp.experiments.evaluations import dataset_names, evaluated_model, settings_of
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.ingestion.metrics_store import latest_points

ModelKey = tuple[int, int]  # (evaluated run id, step); (0, 0) the base model


@dataclass
class EvalCell:
    run: Run
    metrics: dict[str, float]

    @property
    def acc(self) -> float | None:
        return self.metrics.get(EVAL_ACC)

    @property
    def pass_at_1(self) -> float | None:
        return self.metrics.get(EVAL_PASS_AT_1)

    @property
    def pass_at_k(self) -> float | None:
        return self.metrics.get(EVAL_PASS_AT_K)

    @property
    def reward_mean(self) -> float | None:
        return self.metrics.get(EVAL_REWARD_MEAN)

    @property
    def partial(self) -> bool:
        """Scores of the batches an evaluation stored before it ended early (docs/evaluations.md#a-run-that-ends-early)."""
        return self.run.status != RunStatus.SUCCEEDED

    @property
    def k(self) -> int | None:
        value = self.metrics.get(EVAL_K)
        return int(value) if value is not None else None


@dataclass
class EvalRow:
    split: str  # dataset:<id>
    label: str  # the dataset's name
    cells: list[EvalCell | None] = field(default_factory=list)


@dataclass
class EvalTable:
    columns: list[str]
    rows: list[EvalRow]


def _model_key(run: Run) -> ModelKey:
    return (run.evaluated_run_id or 0, run.evaluated_step or 0)


def evaluation_table(experiment: Experiment) -> EvalTable:
    """The latest evaluation per (split, model); a succeeded one wins over a newer one that did not."""
    evaluations = list(
        experiment.runs.filter(kind=RunKind.EVALUATION)
        .select_related("evaluated_run")
        .order_by("created", "id")
    )
    chosen: dict[tuple[str, ModelKey], Run] = {}
    for run in evaluations:
        key = (str(settings_of(run)["dataset"]), _model_key(run))
        earlier = chosen.get(key)
        if earlier is None or run.status == RunStatus.SUCCEEDED or earlier.status != RunStatus.SUCCEEDED:
            chosen[key] = run
    models = sorted({model for _, model in chosen}, key=lambda m: (m != (0, 0), m))
    labels = {_model_key(run): evaluated_model(run) for run in chosen.values()}
    latest = latest_points([run.pk for run in chosen.values()])
    metrics = {pk: {key: value for key, value, _ts, _step in points} for pk, points in latest.items()}
    rows = []
    names = dataset_names({split for split, _ in chosen})
    for split in sorted({split for split, _ in chosen}):
        cells: list[EvalCell | None] = []
        for model in models:
            found = chosen.get((split, model))
            cells.append(EvalCell(found, metrics.get(found.pk, {})) if found is not None else None)
        rows.append(EvalRow(split, names.get(split, split), cells))
    return EvalTable([labels[model] for model in models], rows)
