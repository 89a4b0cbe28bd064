"""An SFT run on the verl backend: RunConfig → verl's own SFT trainer command (docs/sft.md#on-verl).

verl 0.9.1 fine-tunes with ``verl.trainer.sft_trainer`` (Hydra config ``sft_trainer_engine``, FSDP
engine), launched by ``torchrun`` with one process per GPU. It reads demonstrations through its
``MultiTurnSFTDataset``: the ``messages`` column (``data.messages_key``) and the ``tools`` column
(``data.tools_key``) of the chat-messages contract, with the loss on assistant tokens only, packed
without padding (``data.pad_mode: no_padding``). Pure functions, as in :mod:`.command`: nothing here
starts a process or touches a GPU; :func:`sft_problems` composes verl's real config with our overrides
on CPU so the experiment form names a key verl does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer.backends.verl.command import (
    LOGGERS,
    VerlPaths,
    hydra_value,
    placement_and_names,
    resume_and_contents,
    schedule,
    start_model_path,
    verl_config_dir,
)
from trainer.contract import MESSAGES_KEY, TOOLS_KEY

if TYPE_CHECKING:
    from trainer.config import RunConfig

SFT_MODULE = "verl.trainer.sft_trainer"
SFT_CONFIG_NAME = "sft_trainer_engine"
FSDP_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}  # verl's engine.dtype spelling


def _data(config: RunConfig, paths: VerlPaths) -> dict[str, Any]:
    data = config.data
    return {
        "data.train_files": paths.train_files,
        "data.val_files": paths.val_files,
        "data.messages_key": MESSAGES_KEY,
        "data.tools_key": TOOLS_KEY,
        "data.max_length": config.sft.max_length,
        # Ours cuts a conversation longer than sft.max_length at its end, as verl's "right" does.
        "data.truncation": "right",
        "data.pad_mode": "no_padding",
        "data.train_batch_size": config.trainer.batch_size,
        "data.micro_batch_size_per_gpu": config.optim.micro_batch_size,
        "data.use_dynamic_bsz": False,
        "data.val_max_samples": data.val_max_samples if data.val_max_samples is not None else -1,
    }


def _model_and_optim(config: RunConfig) -> dict[str, Any]:
    model, optim = config.model, config.optim
    return {
        "model.path": start_model_path(config),
        "model.trust_remote_code": model.trust_remote_code,
        "model.enable_gradient_checkpointing": model.gradient_checkpointing,
        "model.lora_rank": model.lora_rank,
        "model.lora_alpha": model.lora_alpha,
        "engine.model_dtype": "fp32",  # master weights; compute in engine.dtype
        "engine.dtype": FSDP_DTYPES[model.dtype],
        "engine.seed": config.trainer.seed,
        "optim.lr": optim.lr,
        "optim.weight_decay": optim.weight_decay,
        "optim.clip_grad": optim.grad_clip,
        "optim.lr_warmup_steps": optim.warmup_steps if optim.warmup_steps > 0 else -1,
    }


def _trainer(
    config: RunConfig, paths: VerlPaths, project: str, run_name: str, loggers: Sequence[str]
) -> dict[str, Any]:
    trainer = config.trainer
    return {
        **schedule(config, paths),
        # verl stops at the end of its last epoch even before total_training_steps: one epoch per
        # step is always enough (a step takes at least one batch of the file).
        "trainer.total_epochs": trainer.total_steps,
        "trainer.seed": trainer.seed,
        # hf_model: a Hugging Face folder beside the FSDP shards, which any tool (and an RL run) loads.
        **resume_and_contents(config, "checkpoint.save_contents", also=["hf_model"]),
        "trainer.max_ckpt_to_keep": trainer.keep_checkpoints,
        **placement_and_names(config, paths, project, run_name, loggers),
    }


def sft_overrides(
    config: RunConfig, paths: VerlPaths, *, project: str, run_name: str, loggers: Sequence[str] = LOGGERS
) -> list[str]:
    """Hydra overrides that make verl's ``sft_trainer_engine`` config fine-tune as ``config`` says."""
    values = {
        **_data(config, paths),
        **_model_and_optim(config),
        **_trainer(config, paths, project, run_name, loggers),
    }
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def sft_command(
    config: RunConfig,
    paths: VerlPaths,
    *,
    project: str,
    run_name: str,
    torchrun: Sequence[str] = ("torchrun",),
    loggers: Sequence[str] = LOGGERS,
) -> list[str]:
    """The argv that runs verl's SFT trainer: one torchrun process per GPU of each node."""
    resources = config.resources
    launch = [f"--nnodes={resources.nodes}", f"--nproc_per_node={max(resources.gpus_per_node, 1)}"]
    if resources.nodes == 1:
        launch.insert(0, "--standalone")
    return [
        *torchrun,
        *launch,
        "-m",
        SFT_MODULE,
        *sft_overrides(config, paths, project=project, run_name=run_name, loggers=loggers),
    ]


def compose_sft(config: RunConfig, paths: VerlPaths) -> Any:
    """verl's ``sft_trainer_engine`` DictConfig with our overrides applied (Hydra, no GPU): a key verl
    does not have fails here as it would on the cluster."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return hydra_compose(
            SFT_CONFIG_NAME, overrides=sft_overrides(config, paths, project="p", run_name="r")
        )


def sft_problems(config: RunConfig, paths: VerlPaths) -> list[tuple[str, str]]:
    """verl's objections to the SFT command of ``config``: [] when verl's SFT config composes with
    every override (the batch split over GPUs is VerlBackend.problems')."""
    try:
        composed = compose_sft(config, paths)
    except Exception as error:  # Hydra's override and config errors alike
        return [("sft.enabled", f"verl's SFT trainer rejects this config: {error}")]
    if composed.data.messages_key != MESSAGES_KEY:  # the key verl reads demonstrations from
        return [("sft.enabled", f"verl's SFT trainer would not read the {MESSAGES_KEY} column")]
    return []
