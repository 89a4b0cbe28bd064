"""The torch backend's evaluation mode: a checkpoint's weights sampled k times per val row, scored,
reported like training steps, with no update; its eval/... metrics are those of what it reported."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainer.backends import BACKENDS
from trainer.backends.torch.checkpoint import latest_checkpoint
from trainer.config import RunConfig
from trainer.contract import EVAL_ACC, EVAL_K, EVAL_PASS_AT_K, EVAL_PROMPTS, TRAJECTORY_ACC
from trainer.evaluation import metrics_of
from trainer.registry import Registry
from trainer.report.reporters import MemoryReporter
from trainer.rewards import REWARDS


def starts_with_a_letter(
    solution_str: str, ground_truth: Any, extra_info: dict[str, Any]
) -> dict[str, float]:
    return {"score": float(solution_str[:1].isalpha()), "acc": float(solution_str[:1].isalpha())}


def test_an_evaluation_of_a_checkpoint_reports_what_its_samples_scored_and_changes_no_weight(
    tiny_model_dir: Path,
    rows_file: Callable[..., Path],
    tmp_path: Path,
    temp_register: Callable[[Registry[Any], str, Any], Any],
) -> None:
    temp_register(REWARDS, "letter", starts_with_a_letter)
    rows = rows_file("rows.parquet", 5, "letter", agent_name="single_step")
    common = {
        "model.path": str(tiny_model_dir), "data.train_path": str(rows), "data.max_prompt_length": 256,
        "rollout.max_new_tokens": 3, "trainer.batch_size": 2, "trainer.device": "cpu", "optim.lr": 1e-2,
        "optim.mini_batch_size": 4, "algorithm.skip_zero_advantage_groups": False,
    }  # fmt: skip
    trained = RunConfig.from_preset(
        "grpo",
        **common,
        **{"rollout.n": 2, "trainer.total_steps": 1, "trainer.checkpoint_dir": str(tmp_path / "ck")},
    )
    BACKENDS.get("torch").train(trained, MemoryReporter())
    checkpoint = latest_checkpoint(tmp_path / "ck")
    assert checkpoint is not None
    weights = (checkpoint / "policy" / "model.safetensors").read_bytes()

    evaluation = RunConfig.from_preset("grpo", **common, **{
        "rollout.n": 3, "rollout.temperature": 0.0, "data.val_path": str(rows), "data.val_max_samples": 3,
        "evaluation.enabled": True, "evaluation.checkpoint": str(checkpoint),
    })  # fmt: skip
    reporter = MemoryReporter()
    result = BACKENDS.get("torch").train(evaluation, reporter)

    assert result.status == "succeeded"
    assert [step for step, _ in reporter.heartbeats] == [0, 1, 2]  # 3 rows in batches of 2
    sent = [t for _, batch in reporter.trajectories for t in batch]
    assert len(sent) == 3 * 3 and {len({t.group_id for t in sent})} == {3}
    assert all(TRAJECTORY_ACC in t.metrics for t in sent)
    final_step, final = reporter.metrics[-1]
    assert final_step == 2 and final == pytest.approx(metrics_of(sent, 3))
    assert final[EVAL_PROMPTS] == 3 and final[EVAL_K] == 3 and 0.0 <= final[EVAL_ACC] <= final[EVAL_PASS_AT_K]
    # Greedy samples of one prompt are one answer: pass@k is then the accuracy.
    assert final[EVAL_PASS_AT_K] == pytest.approx(final[EVAL_ACC])
    assert (checkpoint / "policy" / "model.safetensors").read_bytes() == weights


def test_an_evaluation_needs_a_val_split_and_a_checkpoint_needs_an_evaluation() -> None:
    with pytest.raises(ValueError, match=r"data\.val_path"):
        RunConfig(evaluation={"enabled": True})
    with pytest.raises(ValueError, match=r"evaluation\.enabled"):
        RunConfig(evaluation={"checkpoint": "/x"})
