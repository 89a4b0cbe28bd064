"""Checkpoints in Hugging Face format, resuming from the latest one, and keeping the newest k.

Layout of ``<checkpoint_dir>/step_00000012/`` (docs/checkpoints.md)::

    policy/              save_pretrained model + tokenizer (loadable by any HF tool); with LoRA,
                         the PEFT adapter (adapter_config.json names the base model)
    critic/              the value model (backbone + value_head.pt), when the preset has one
    optimizer.pt         AdamW states of the actor and the critic    } resumable runs only
    rng.pt               torch, Python and sampler RNG states        } (trainer.resume)
    trainer_state.json   step, metrics, the run config

A checkpoint is written to a temporary folder and renamed into place, so a folder named
``step_*`` is always complete: a run killed mid-save resumes from the previous one.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.backends.torch.checkpoint_folders import (
    OPTIMIZER_FILE,
    RNG_FILE,
    STATE_FILE,
    checkpoint_path,
    complete_checkpoints,
)
from trainer.contract import POLICY_FOLDER

if TYPE_CHECKING:
    from trainer.backends.torch.update import Models

logger = logging.getLogger(__name__)


@dataclass
class Resumed:
    step: int
    path: Path
    state: dict[str, Any]


def folder_size(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def prune_checkpoints(root: str | Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints; the deleted folders, oldest first.

    Only called after a save completed, so the newest one is never a half-written folder.
    """
    found = complete_checkpoints(root)
    doomed = found[: max(len(found) - keep, 0)]
    for path in doomed:
        shutil.rmtree(path)
        logger.info("checkpoint deleted (trainer.keep_checkpoints = %d): %s", keep, path)
    return doomed


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "generators": {name: generator.get_state() for name, generator in generators.items()},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    for name, generator in generators.items():
        if name in state["generators"]:
            generator.set_state(state["generators"][name])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def policy_folder(checkpoint: str, field: str) -> Path:
    """The policy/ weights inside a checkpoint folder named by the config field ``field``."""
    folder = Path(checkpoint) / POLICY_FOLDER
    if not folder.is_dir():
        raise FileNotFoundError(f"{field} {checkpoint} has no {POLICY_FOLDER}/")
    return folder


def save_checkpoint(
    root: str | Path,
    step: int,
    models: Models,
    tokenizer: Any,
    *,
    generators: dict[str, torch.Generator],
    metrics: dict[str, float],
    config_json: str,
    resumable: bool,
) -> Path:
    """Write the checkpoint of ``step`` and return its folder: the weights, and the optimizer and RNG
    states only when ``resumable`` (AdamW's two moments are twice the weights' size)."""
    final = checkpoint_path(root, step)
    staging = final.with_name(final.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    models.policy.save_pretrained(staging / POLICY_FOLDER)
    tokenizer.save_pretrained(staging / POLICY_FOLDER)
    if models.critic is not None:
        models.critic.save_pretrained(staging / "critic")
    if resumable:
        optimizers = {"actor": models.actor_optimizer.state_dict()}
        if models.critic_optimizer is not None:
            optimizers["critic"] = models.critic_optimizer.state_dict()
        torch.save(optimizers, staging / OPTIMIZER_FILE)
        torch.save(rng_state(generators), staging / RNG_FILE)
    state = {"step": step, "metrics": metrics, "config": json.loads(config_json), "resumable": resumable}
    (staging / STATE_FILE).write_text(json.dumps(state, indent=2, default=float))
    if final.exists():  # a rerun of the same step after a crash: the new one wins
        shutil.rmtree(final)
    staging.rename(final)
    logger.info("checkpoint written: %s", final)
    return final


def load_training_state(path: Path, models: Models, *, generators: dict[str, torch.Generator]) -> Resumed:
    """Restore optimizer and RNG states (weights are loaded from ``path/policy`` by the caller)."""
    if not (path / OPTIMIZER_FILE).is_file():
        raise ValueError(
            f"checkpoint {path} holds the weights only (its run did not set trainer.resume), so training "
            f"cannot continue exactly from it: start a new run with model.path set to {path / POLICY_FOLDER}"
        )
    optimizers = torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=False)
    models.actor_optimizer.load_state_dict(optimizers["actor"])
    if models.critic_optimizer is not None:
        if "critic" not in optimizers:
            raise ValueError(f"checkpoint {path} has no critic, but this run trains one")
        models.critic_optimizer.load_state_dict(optimizers["critic"])
    restore_rng(torch.load(path / RNG_FILE, map_location="cpu", weights_only=False), generators)
    state = json.loads((path / STATE_FILE).read_text())
    return Resumed(step=int(state["step"]), path=path, state=state)
