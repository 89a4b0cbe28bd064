"""verl's own Tracking (verl.utils.tracking, default_backend=["mlflow"]) into the live server, with no
change inside verl: how `trainer.logger=[console,mlflow]` runs report."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from webapp.experiments.models import Run, RunStatus

CONFIG = {
    "trainer": {"project_name": "verl-gsm8k", "total_epochs": 1, "logger": ["console", "mlflow"]},
    "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}, "rollout": {"name": "vllm", "n": 4}},
    "data": {"train_files": ["/data/gsm8k/train.parquet"]},
}


def _verl_steps(tracker: Any, steps: range) -> None:
    for step in steps:
        tracker.log(
            {"critic/score/mean": step / 10, "actor/pg_loss": -0.01 * step, "timing_s/gen": 1.5,
             "val-core/gsm8k/acc/mean@4": 0.25},
            step=step,
        )  # fmt: skip


def _series(run: Run) -> dict[str, list[int]]:
    from webapp.ingestion.models import MetricPoint

    found: dict[str, list[int]] = {}
    for key, step in MetricPoint.objects.filter(run=run).order_by("step").values_list("key__name", "step"):
        found.setdefault(key, []).append(step)
    return found


def test_verl_tracking_logs_a_new_run_into_the_product(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    from verl.utils.tracking import Tracking

    tracking(tokens["alice"])
    tracker = Tracking(
        project_name="verl-gsm8k", experiment_name="qwen3-grpo", default_backend=["mlflow"], config=CONFIG
    )
    assert "mlflow" in tracker.logger, "verl gave up on MLflow (it only logs a warning)"
    _verl_steps(tracker, range(1, 4))
    tracker.finish()

    run = Run.objects.select_related("experiment").get(name="qwen3-grpo")
    assert run.experiment.name == "verl-gsm8k" and run.is_external and run.status == RunStatus.SUCCEEDED
    assert _series(run) == {
        "actor/pg_loss": [1, 2, 3],
        "critic/score/mean": [1, 2, 3],
        "timing_s/gen": [1, 2, 3],
        "val-core/gsm8k/acc/mean_at_4": [1, 2, 3],  # verl's own key sanitising ('@' is not allowed)
        # and each of verl's keys that names a quantity of ours, under our key as well
        "reward/mean": [1, 2, 3],
        "timing/rollout_s": [1, 2, 3],
        "val/gsm8k/acc": [1, 2, 3],
    }
    params = dict(run.logged.params().values_list("key", "value"))
    assert params["actor_rollout_ref/actor/optim/lr"] == "1e-06" and params["trainer/total_epochs"] == "1"


@pytest.mark.slow
def test_a_launched_verl_run_reports_through_mlflow_run_id_and_its_run_token(
    tracking: Callable[[str], str], launched_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl.utils.tracking import Tracking

    tracking(launched_run.issue_token())
    monkeypatch.setenv("MLFLOW_RUN_ID", launched_run.mlflow_run_id)
    tracker = Tracking(
        project_name="ignored", experiment_name="ignored", default_backend=["mlflow"], config=CONFIG
    )
    assert "mlflow" in tracker.logger, "verl gave up on MLflow (it only logs a warning)"
    _verl_steps(tracker, range(1, 6))
    tracker.finish()

    run = Run.objects.get(pk=launched_run.pk)
    assert run.status == RunStatus.RUNNING and not run.is_external and run.step == 5
    assert _series(run)["critic/score/mean"] == _series(run)["reward/mean"] == [1, 2, 3, 4, 5]
    assert run.logged.params().filter(key="actor_rollout_ref/rollout/name", value="vllm").exists()
    assert Run.objects.count() == 1 and "MLFLOW_RUN_ID" not in os.environ  # attached, nothing new created
