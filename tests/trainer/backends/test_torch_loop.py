"""The torch training loop: reporting, validation, checkpoints, exact resume, stopping, data order."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trainer.backends.torch.checkpoint_folders import latest_checkpoint
from trainer.backends.torch.data import batch_for_step, load_rows
from trainer.backends.torch.loop import setup_run, train, train_step
from trainer.config import RunConfig
from trainer.contract import (
    PERF_GENERATED_TOKENS,
    PERF_TOKENS_PER_S,
    TIME_BREAKDOWN_KEYS,
    TIMING_ADV_S,
    TIMING_CHECKPOINT_S,
    TIMING_ENV_S,
    TIMING_GENERATE_S,
    TIMING_OLD_LOG_PROB_S,
    TIMING_REWARD_S,
    TIMING_STEP_S,
    TIMING_UPDATE_ACTOR_S,
)
from trainer.model_size import checkpoint_bytes
from trainer.registry import Registry
from trainer.report.reporters import MemoryReporter
from trainer.rewards import REWARDS


def starts_with_a_letter(
    solution_str: str, ground_truth: Any, extra_info: dict[str, Any]
) -> dict[str, float]:
    return {"score": float(solution_str[:1].isalpha()), "acc": float(solution_str[:1].isalpha())}


@pytest.fixture
def letter_task(temp_register: Callable[[Registry[Any], str, Any], Any]) -> str:
    temp_register(REWARDS, "letter", starts_with_a_letter)
    return "letter"


@pytest.fixture
def make_config(
    tiny_model_dir: Path, letter_task: str, rows_file: Callable[..., Path], tmp_path: Path
) -> Callable[..., RunConfig]:
    train_path = rows_file("train.parquet", 6, letter_task, agent_name="single_step")

    def make(preset: str = "grpo", **overrides: Any) -> RunConfig:
        values = {
            "model.path": str(tiny_model_dir),
            "data.train_path": str(train_path),
            "data.max_prompt_length": 256,
            "rollout.n": 2,
            "rollout.max_new_tokens": 3,
            "trainer.batch_size": 2,
            "trainer.total_steps": 2,
            "trainer.device": "cpu",
            "optim.lr": 1e-2,
            "optim.mini_batch_size": 2,  # two mini-batches: π_old gets its own pass
            "optim.micro_batch_size": 2,
            # A random tiny model often draws equal rewards for a whole group; keep those groups so
            # every step runs the actor update (the skipping has its own test).
            "algorithm.skip_zero_advantage_groups": False,
        }
        return RunConfig.from_preset(preset, **{**values, **overrides})

    return make


def test_it_reports_metrics_trajectories_and_heartbeats_every_step(
    make_config: Callable[..., RunConfig],
) -> None:
    reporter = MemoryReporter()
    result = train(make_config(), reporter)

    assert result.status == "succeeded" and result.last_step == 2 and result.steps_run == 2
    assert [step for step, _ in reporter.metrics] == [1, 2]
    for key in ("reward/mean", "reward/std", "actor/entropy", "actor/kl", "timing/rollout_s", "timing/update_s",
                "response_length/mean", "num_turns/mean", "perf/samples_per_s", "tools/error_rate"):  # fmt: skip
        assert key in reporter.metrics[-1][1], key
    assert reporter.heartbeats == [(0, 2), (1, 2), (2, 2)]
    # Where the step's time went (docs/health.md#time-breakdown): the parts a GRPO step has, within it.
    last = reporter.metrics[-1][1]
    parts = [
        TIMING_GENERATE_S,
        TIMING_ENV_S,
        TIMING_REWARD_S,
        TIMING_OLD_LOG_PROB_S,
        TIMING_ADV_S,
        TIMING_UPDATE_ACTOR_S,
    ]
    assert all(last[key] >= 0 for key in parts) and last[TIMING_GENERATE_S] > 0
    assert sum(last[key] for key in TIME_BREAKDOWN_KEYS if key in last) <= last[TIMING_STEP_S]
    assert last[PERF_TOKENS_PER_S] == pytest.approx(last[PERF_GENERATED_TOKENS] / last[TIMING_GENERATE_S])
    step, trajectories = reporter.trajectories[0]
    assert step == 1 and len(trajectories) == 4
    assert [t.group_id for t in trajectories] == ["step1-p0", "step1-p0", "step1-p1", "step1-p1"]
    assert all(s.advantage is not None and s.reward is not None for t in trajectories for s in t.steps)
    assert reporter.statuses == []  # the caller (the CLI) owns run statuses


def test_it_validates_greedily_on_the_val_split(
    make_config: Callable[..., RunConfig], rows_file: Callable[..., Path], letter_task: str
) -> None:
    val_path = rows_file("val.parquet", 5, letter_task, agent_name="single_step", text="Question {i}?")
    reporter = MemoryReporter()
    train(
        make_config(**{"data.val_path": str(val_path), "trainer.val_every": 1, "data.val_max_samples": 3}),
        reporter,
    )

    accuracies = reporter.series("val/letter/acc")
    assert [step for step, _ in accuracies] == [1, 2]
    assert all(value in (0.0, 1 / 3, 2 / 3, 1.0) for _, value in accuracies)


def test_a_resumed_run_continues_exactly_where_it_stopped(
    make_config: Callable[..., RunConfig], tmp_path: Path
) -> None:
    # One thread for both: the thread budget follows the machine's load, and another thread count sums
    # the same products in another order (beside another test worker the weights drifted past 1e-6).
    one = {"trainer.num_threads": 1}
    straight = MemoryReporter()
    train(
        make_config(**{"trainer.total_steps": 3, "trainer.checkpoint_dir": str(tmp_path / "a")}, **one),
        straight,
    )

    first, second = MemoryReporter(), MemoryReporter()
    # trainer.resume from the start: only a resumable run's checkpoints hold optimizer and RNG state.
    interrupted = make_config(
        **{"trainer.total_steps": 2, "trainer.checkpoint_dir": str(tmp_path / "b"), "trainer.resume": True},
        **one,
    )
    train(interrupted, first)
    result = train(interrupted.with_overrides(**{"trainer.total_steps": 3}), second)

    assert [step for step, metrics in second.metrics if TIMING_STEP_S in metrics] == [
        3
    ]  # then its checkpoint's time
    assert result.last_step == 3 and result.steps_run == 1
    assert second.heartbeats[0] == (2, 3)
    for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert second.metrics[0][1][key] == pytest.approx(straight.metrics[2][1][key], rel=1e-5, abs=1e-7), (
            key
        )
    expected = load_file(tmp_path / "a" / "step_00000003" / "policy" / "model.safetensors")
    resumed = load_file(tmp_path / "b" / "step_00000003" / "policy" / "model.safetensors")
    assert all(torch.allclose(expected[name], resumed[name], atol=1e-6) for name in expected)
    assert [Path(path).name for _, path, _ in first.checkpoints + second.checkpoints] == [
        "step_00000002",
        "step_00000003",
    ]


def test_checkpoints_hold_the_weights_only_and_only_the_newest_k_are_kept(
    make_config: Callable[..., RunConfig], tmp_path: Path
) -> None:
    root = tmp_path / "ck"
    config = make_config(
        **{
            "trainer.total_steps": 3,
            "trainer.save_every": 1,
            "trainer.checkpoint_dir": str(root),
            "trainer.keep_checkpoints": 2,
        }
    )
    reporter = MemoryReporter()

    train(config, reporter)

    assert sorted(path.name for path in root.iterdir()) == ["step_00000002", "step_00000003"]
    for folder in root.iterdir():
        assert (folder / "policy" / "model.safetensors").is_file()
        assert not (folder / "optimizer.pt").exists() and not (folder / "rng.pt").exists()
    saved = [(r.step, r.size_bytes) for r in reporter.checkpoint_records if not r.deleted]
    assert [step for step, _ in saved] == [1, 2, 3]
    assert [step for step, seconds in reporter.series(TIMING_CHECKPOINT_S) if seconds > 0] == [1, 2, 3]
    weights_bytes = (root / "step_00000003" / "policy" / "model.safetensors").stat().st_size
    expected = checkpoint_bytes(config.model.path, dtype=config.model.dtype)  # the form's estimate
    assert expected is not None and abs(weights_bytes - expected) < 0.05 * expected
    assert all(size is not None and size > weights_bytes for _, size in saved)
    assert [(r.step, Path(r.path).name) for r in reporter.checkpoint_records if r.deleted] == [
        (1, "step_00000001")
    ]


def test_by_default_only_the_last_checkpoint_is_kept(
    make_config: Callable[..., RunConfig], tmp_path: Path
) -> None:
    root = tmp_path / "ck"
    config = make_config(
        **{"trainer.total_steps": 2, "trainer.save_every": 1, "trainer.checkpoint_dir": str(root)}
    )
    reporter = MemoryReporter()

    train(config, reporter)

    assert sorted(path.name for path in root.iterdir()) == ["step_00000002"]
    assert [(r.step, r.deleted) for r in reporter.checkpoint_records] == [(1, False), (2, False), (1, True)]


def _stopped_after_the_first_step(config: RunConfig) -> tuple[Any, MemoryReporter]:
    stop = threading.Event()

    class StopAfterFirstStep(MemoryReporter):
        def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
            super().log_metrics(step, metrics)
            stop.set()

    reporter = StopAfterFirstStep()
    return train(config, reporter, stop_event=stop), reporter


def test_a_cancelled_run_writes_no_checkpoint_unless_asked(
    make_config: Callable[..., RunConfig], tmp_path: Path
) -> None:
    config = make_config(**{"trainer.total_steps": 5, "trainer.checkpoint_dir": str(tmp_path / "ck")})
    result, reporter = _stopped_after_the_first_step(config)

    assert result.status == "cancelled" and result.last_step == 1
    assert result.checkpoint is None and reporter.checkpoint_records == []
    assert latest_checkpoint(tmp_path / "ck") is None


def test_it_stops_between_steps_and_writes_a_checkpoint_when_asked(
    make_config: Callable[..., RunConfig], tmp_path: Path
) -> None:
    config = make_config(
        **{
            "trainer.total_steps": 5,
            "trainer.checkpoint_dir": str(tmp_path / "ck"),
            "trainer.checkpoint_on_cancel": True,
        }
    )
    result, _reporter = _stopped_after_the_first_step(config)

    assert result.status == "cancelled" and result.last_step == 1
    assert latest_checkpoint(tmp_path / "ck") == tmp_path / "ck" / "step_00000001"
    assert result.checkpoint == tmp_path / "ck" / "step_00000001"
    assert (result.checkpoint / "policy" / "tokenizer_config.json").is_file()
    assert (result.checkpoint / "policy" / "chat_template.jinja").is_file()


def test_it_skips_the_whole_update_when_no_group_has_a_learning_signal(
    make_config: Callable[..., RunConfig], temp_register: Callable[[Registry[Any], str, Any], Any],
    rows_file: Callable[..., Path],
) -> None:  # fmt: skip
    temp_register(REWARDS, "constant", lambda solution, truth, info: 1.0)
    path = rows_file("constant.parquet", 4, "constant", agent_name="single_step")
    reporter = MemoryReporter()
    config = make_config(
        **{
            "data.train_path": str(path),
            "trainer.total_steps": 1,
            "algorithm.skip_zero_advantage_groups": True,
        }
    )
    train(config, reporter)

    metrics = reporter.metrics[0][1]
    assert metrics["actor/updates"] == 0.0
    assert metrics["actor/skipped_groups"] == 2.0 and metrics["actor/skipped_trajectories"] == 4.0
    assert "actor/pg_loss" not in metrics


def test_batches_follow_a_seeded_order_that_wraps_into_the_next_epoch() -> None:
    rows = [{"i": i} for i in range(5)]
    steps = [batch_for_step(rows, step, 2, seed=3, shuffle=True) for step in (1, 2, 3, 4, 5)]
    first_epoch = [row["i"] for batch in steps[:2] for row in batch] + [steps[2][0]["i"]]
    assert sorted(first_epoch) == [0, 1, 2, 3, 4]
    assert steps == [batch_for_step(rows, step, 2, seed=3, shuffle=True) for step in (1, 2, 3, 4, 5)]
    assert [row["i"] for row in batch_for_step(rows, 1, 5, seed=3, shuffle=False)] == [0, 1, 2, 3, 4]


def test_it_rejects_a_dataset_row_without_an_index(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {"data_source": "x", "prompt": [{"role": "user", "content": "hi"}], "reward_model": {"ground_truth": ""},
           "extra_info": {"split": "train"}}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"row 0: extra_info.index is missing"):
        load_rows(tmp_path / "bad.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "hi"}]), tmp_path / "worse.parquet")
    with pytest.raises(ValueError, match="lacks column"):
        load_rows(tmp_path / "worse.parquet")


@pytest.mark.slow
def test_bf16_weights_train_policy_and_critic_through_fp32_masters_with_gradient_checkpointing(
    make_config: Callable[..., RunConfig],
) -> None:
    config = make_config(
        "ppo",
        **{"model.dtype": "bfloat16", "model.gradient_checkpointing": True, "algorithm.kl_mode": "loss"},
    )
    run = setup_run(config)
    models = run.models
    trained = (models.policy, models.critic)
    assert all(p.dtype == torch.bfloat16 for m in (*trained, models.reference) for p in m.parameters())
    before = [m.clone() for m in models.actor_optimizer.param_groups[0]["params"]]
    reporter = MemoryReporter()

    metrics = train_step(run, 1, reporter)

    for key in ("actor/pg_loss", "actor/grad_norm", "critic/value_loss", "critic/grad_norm"):
        assert math.isfinite(metrics[key]) and key in metrics, key
    assert metrics["actor/grad_norm"] > 0 and metrics["critic/grad_norm"] > 0
    for model, optimizer in zip(trained, (models.actor_optimizer, models.critic_optimizer), strict=True):
        masters = optimizer.param_groups[0]["params"]
        assert all(m.dtype == torch.float32 for m in masters)
        # The model holds its masters rounded to bf16, and no gradient is left on it.
        assert all(torch.equal(p, m.to(torch.bfloat16)) and p.grad is None
                   for p, m in zip(model.parameters(), masters, strict=True))  # fmt: skip
    assert any(
        not torch.equal(old, new)
        for old, new in zip(before, models.actor_optimizer.param_groups[0]["params"], strict=True)
    )
