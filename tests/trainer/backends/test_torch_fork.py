"""A fork that keeps the optimiser state (docs/checkpoints.md#fork): the torch backend loads the
actor's AdamW moments of the start_from checkpoint, with this run's own hyperparameters; without
start_from.optimizer a run starting from the same checkpoint warms its moments up from zero."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.backends.test_torch_sft import demos_file, sft_config  # noqa: F401 (a fixture)
from trainer.backends.torch.backend import TorchBackend
from trainer.backends.torch.checkpoint import complete_checkpoints
from trainer.backends.torch.loop import setup_run
from trainer.backends.torch.sft import setup_sft
from trainer.config import RunConfig
from trainer.contract import OPTIMIZER_FILE
from trainer.report.reporters import MemoryReporter


def moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [state["exp_avg"] for state in optimizer.state_dict()["state"].values()]


def test_a_fork_keeps_the_checkpoints_optimiser_state_only_when_asked_with_its_own_hyperparameters(
    tiny_model_dir: Path,
    demos_file: Callable[[str, int], Path],  # noqa: F811
    rows_file: Any,
    tmp_path: Path,
) -> None:
    parent = sft_config(
        tiny_model_dir,
        demos_file("train.parquet", 4),
        **{"trainer.total_steps": 2, "trainer.resume": True, "trainer.checkpoint_dir": str(tmp_path / "p")},
    )
    TorchBackend().train(parent, MemoryReporter())
    checkpoint = complete_checkpoints(tmp_path / "p")[-1]
    saved = moments_of_file(checkpoint)
    start = {"start_from.run": 1, "start_from.checkpoint": str(checkpoint), "optim.weight_decay": 0.5}

    kept = setup_sft(
        parent.with_overrides(**start, **{"start_from.optimizer": True, "trainer.resume": False})
    )
    assert len(saved) == len(moments(kept.models.actor_optimizer)) > 0
    assert all(torch.equal(a, b) for a, b in zip(saved, moments(kept.models.actor_optimizer), strict=True))
    assert {group["weight_decay"] for group in kept.models.actor_optimizer.param_groups} == {0.5}
    fresh = setup_sft(parent.with_overrides(**start, **{"trainer.resume": False}))
    assert moments(fresh.models.actor_optimizer) == []

    rl = RunConfig.from_preset(  # the RL loop loads it the same way (the web app checks the algorithm)
        "grpo",
        **{
            "model.path": str(tiny_model_dir),
            "data.train_path": str(rows_file("rl.parquet", 2, "x")),
            "trainer.device": "cpu",
            **start,
            "start_from.optimizer": True,
        },
    )
    run = setup_run(rl)
    assert all(torch.equal(a, b) for a, b in zip(saved, moments(run.models.actor_optimizer), strict=True))


def moments_of_file(checkpoint: Path) -> list[torch.Tensor]:
    saved = torch.load(checkpoint / OPTIMIZER_FILE, map_location="cpu", weights_only=False)
    return [state["exp_avg"] for state in saved["actor"]["state"].values()]


def test_a_fork_that_keeps_an_optimiser_state_the_checkpoint_lacks_stops_before_training(
    tiny_model_dir: Path,
    demos_file: Callable[[str, int], Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    weights_only = tmp_path / "step_00000001"
    (weights_only / "policy").mkdir(parents=True)
    config = sft_config(
        tiny_model_dir,
        demos_file("train.parquet", 2),
        **{"start_from.run": 1, "start_from.checkpoint": str(weights_only), "start_from.optimizer": True},
    )
    from trainer.backends.torch.fork import keep_start_optimizer

    with pytest.raises(FileNotFoundError, match="start without the optimiser state"):
        keep_start_optimizer(config, None)  # type: ignore[arg-type]
