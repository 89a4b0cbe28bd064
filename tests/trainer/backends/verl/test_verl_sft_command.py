"""An SFT run on the verl backend: verl's own SFT trainer command, composed against verl's real config
on CPU (docs/sft.md#on-verl)."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.backends import BACKENDS
from trainer.backends.verl.command import DUMMY_PATHS, overrides
from trainer.backends.verl.sft_command import SFT_MODULE, compose_sft, sft_command, sft_overrides
from trainer.config import RunConfig, config_errors


def sft_config(**changes: Any) -> RunConfig:
    settings: dict[str, Any] = {
        "sft.enabled": True,
        "sft.max_length": 1536,
        "resources.gpus_per_node": 2,
        "model.path": "/models/smollm2",
        "data.val_path": "/tmp/val.parquet",
        "trainer.batch_size": 8,
        "trainer.total_steps": 30,
        "trainer.save_every": 10,
        "trainer.checkpoint_dir": "/shared/runs/7/checkpoints",
        "optim.lr": 1e-5,
        "optim.micro_batch_size": 2,
        "model.lora_rank": 8,
        **changes,
    }
    return RunConfig.from_preset("grpo", backend="verl", **settings)


def test_the_sft_command_runs_verls_sft_trainer_under_torchrun_with_one_process_per_gpu() -> None:
    argv = sft_command(sft_config(), DUMMY_PATHS, project="demo", run_name="sft-run3")
    assert argv[:5] == ["torchrun", "--standalone", "--nnodes=1", "--nproc_per_node=2", "-m"]
    assert argv[5] == SFT_MODULE == "verl.trainer.sft_trainer"


def test_every_setting_reaches_verls_composed_sft_config() -> None:
    composed = compose_sft(sft_config(), DUMMY_PATHS)
    assert composed.data.messages_key == "messages" and composed.data.tools_key == "tools"
    assert composed.data.train_files == DUMMY_PATHS.train_files
    assert composed.data.val_files == DUMMY_PATHS.val_files
    assert (composed.data.max_length, composed.data.truncation) == (1536, "right")
    assert (composed.data.train_batch_size, composed.data.micro_batch_size_per_gpu) == (8, 2)
    assert composed.data.pad_mode == "no_padding"
    assert (composed.model.path, composed.model.lora_rank) == ("/models/smollm2", 8)
    assert composed.optim.lr == 1e-5
    assert (composed.trainer.total_training_steps, composed.trainer.save_freq) == (30, 10)
    assert composed.trainer.test_freq == 30
    assert composed.trainer.n_gpus_per_node == 2
    assert composed.trainer.default_local_dir == DUMMY_PATHS.checkpoint_dir
    assert "hf_model" in composed.checkpoint.save_contents
    assert list(composed.trainer.logger) == ["console", "mlflow"]


def test_a_start_from_checkpoint_is_the_model_verl_loads_for_sft_and_for_rl() -> None:
    config = sft_config(
        **{"start_from.run": 3, "start_from.checkpoint": "/shared/runs/3/checkpoints/step_00000030"}
    )
    assert compose_sft(config, DUMMY_PATHS).model.path == "/shared/runs/3/checkpoints/step_00000030/policy"
    rl = RunConfig.from_preset(
        "grpo",
        backend="verl",
        **{
            "resources.gpus_per_node": 1,
            "optim.mini_batch_size": 8,
            "start_from.checkpoint": "/shared/runs/3/checkpoints/step_00000030",
        },
    )
    assert "actor_rollout_ref.model.path=/shared/runs/3/checkpoints/step_00000030/policy" in overrides(
        rl, DUMMY_PATHS, project="p", run_name="r"
    )


def test_verl_accepts_an_sft_config_and_refuses_a_batch_that_does_not_split_over_its_gpus() -> None:
    verl = BACKENDS.get("verl")
    assert verl.check(sft_config()) == []
    errors = config_errors(
        sft_config().model_dump() | {"trainer": {**sft_config().trainer.model_dump(), "batch_size": 3}}
    )
    assert "multiple of 2" in " ".join(errors["trainer.batch_size"])


def test_a_validation_file_absent_turns_verls_validation_off() -> None:
    paths = DUMMY_PATHS.__class__(**{**vars(DUMMY_PATHS), "val_files": None})
    values = dict(
        item.split("=", 1) for item in sft_overrides(sft_config(), paths, project="p", run_name="r")
    )
    assert (values["data.val_files"], values["trainer.test_freq"]) == ("null", "-1")


@pytest.mark.parametrize("field", ["sft.max_length", "model.lora_rank", "optim.lr", "trainer.batch_size"])
def test_changing_an_sft_setting_changes_the_command(field: str) -> None:
    base = sft_config()
    changed = base.with_overrides(
        **{
            field: {"sft.max_length": 64, "model.lora_rank": 0, "optim.lr": 1e-4, "trainer.batch_size": 4}[
                field
            ]
        }
    )
    assert sft_overrides(base, DUMMY_PATHS, project="p", run_name="r") != sft_overrides(
        changed, DUMMY_PATHS, project="p", run_name="r"
    )
