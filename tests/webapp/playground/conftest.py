"""An experiment of Acme on GSM8K with the calculator, its base model SmolLM2, and a run with two
checkpoints whose policies are tiny random models (real folders where the trainer writes them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from trainer.contract import POLICY_FOLDER
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion.models import Checkpoint

GSM8K_QUESTION = "Tom has 12 apples and buys 30 more. How many apples does he have now?"


def config_json(**overrides: Any) -> dict[str, Any]:
    from tasks_lib.registry import load_recipes
    from trainer.config import RunConfig

    load_recipes()
    fields = {
        "name": "gsm8k play",
        "task": "gsm8k",
        "model": {"path": "smollm2-135m-instruct"},
        "rollout": {"tools": ["calculator"], "max_steps": 3, "max_new_tokens": 96},
        "trainer": {"device": "cpu"},
        **overrides,
    }
    return json.loads(RunConfig.from_mapping(fields).to_json())


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random causal LM with SmolLM2's tokenizer, made once per session."""
    from trainer.models import smollm2_path, tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny") / "policy", smollm2_path(), seed=3)


def saved_checkpoint(run: Run, step: int, policy: Path) -> Checkpoint:
    folder = Path(checkpoint_dir(run)) / f"step_{step:08d}"
    shutil.copytree(policy, folder / POLICY_FOLDER, dirs_exist_ok=True)
    return Checkpoint.objects.create(run=run, step=step, path=str(folder), size_bytes=1)


@pytest.fixture
def gsm8k_experiment(personas: dict[str, Any]) -> Experiment:
    return Experiment.objects.create(
        team=personas["acme"], name="gsm8k play", task="gsm8k", preset="grpo", config=config_json()
    )


@pytest.fixture
def trained_run(gsm8k_experiment: Experiment, tiny_policy: Path) -> Run:
    run = Run.objects.create(
        experiment=gsm8k_experiment,
        team=gsm8k_experiment.team,
        seed=1,
        status=RunStatus.SUCCEEDED,
        config=config_json(),
    )
    for step in (1, 2):
        saved_checkpoint(run, step, tiny_policy)
    return run
