"""What an evaluation that ended early (killed, failed, cancelled) scored on the batches it stored:
the ``eval/...`` metrics its trainer would have reported at its last batch, computed alike from the
stored trajectories, so that its page and the experiment's comparison show them, marked partial
(docs/evaluations.md#a-run-that-ends-early)."""

from __future__ import annotations

import time
from typing import Any

from trainer.contract import EVAL_ACC, EVAL_KEYS, TRAJECTORY_ACC
from trainer.evaluation import evaluation_metrics
from webapp.experiments.models import Run, RunStatus
from webapp.ingestion import metrics_store
from webapp.ingestion.models import Trajectory


def keep_partial_scores(sender: type[Run], run: Run, **_signal: Any) -> None:
    """The receiver of webapp.experiments.signals.run_finished."""
    if run.is_evaluation and run.status != RunStatus.SUCCEEDED:
        store_partial_scores(run)


def store_partial_scores(run: Run) -> bool:
    """Store the scores of the run's stored trajectories unless its trainer reported its own; True
    when this stored them. Replay-safe: one batch id per run."""
    if EVAL_ACC in metrics_store.latest_values(run.pk):
        return False
    rows = list(
        Trajectory.objects.filter(run=run).values_list("group_id", "metrics", "total_reward", "training_step")
    )
    if not rows:
        return False
    k = int(((run.config or {}).get("rollout") or {}).get("n") or 1)
    accuracies = [(group, float((metrics or {}).get(TRAJECTORY_ACC, 0.0))) for group, metrics, _, _ in rows]
    scores = evaluation_metrics(accuracies, [reward for _, _, reward, _ in rows], k)
    step, now = max(row[3] for row in rows), time.time()
    points = [{"key": key, "value": scores[key], "step": step, "ts": now} for key in EVAL_KEYS]
    metrics_store.write_points(run.pk, f"partial-scores-{run.pk}", points)
    return True
