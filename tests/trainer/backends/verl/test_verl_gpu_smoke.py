"""bench/gpu_smoke.sh up to the verl call: its dry run works on CPU and its config passes verl's checks."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.backends.verl import driver
from trainer.backends.verl.command import verl_problems
from trainer.config import RunConfig

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.slow
def test_the_gpu_smoke_dry_run_stages_everything_and_prints_verls_command(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
        "PYTHON": sys.executable,
        "WORK": str(tmp_path),
        "MODEL_DIR": str(tmp_path / "model"),
    }
    done = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_smoke.sh"), "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    argv = shlex.split(done.stdout.strip().splitlines()[-1])
    assert argv[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    for override in (
        "trainer.total_training_steps=2",
        "actor_rollout_ref.rollout.n=2",
        "trainer.n_gpus_per_node=1",
        "trainer.logger=[console]",  # no tracking server outside the webapp
        f"hydra.run.dir={tmp_path / 'run' / 'hydra'}",  # not outputs/ in the working directory
        f"actor_rollout_ref.model.path={tmp_path / 'model'}",
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=trainer.backends.verl.setup_hook.setup_worker",
    ):
        assert override in argv
    assert (tmp_path / "run" / "data" / "train.parquet").is_file()
    assert (tmp_path / "run" / "agent_loops.yaml").is_file()
    config = RunConfig.from_yaml_file(tmp_path / "config.yaml")
    assert verl_problems(config) == []


def test_inside_a_ray_job_with_the_hook_set_the_driver_leaves_it_to_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = '{"runtime_env": {"worker_process_setup_hook": "trainer.backends.verl.setup_hook.setup_worker"}}'
    monkeypatch.setenv(driver.RAY_JOB_CONFIG_ENV, job)
    assert driver.setup_hook_overrides() == []
    monkeypatch.delenv(driver.RAY_JOB_CONFIG_ENV)
    assert driver.setup_hook_overrides() == [
        "+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=trainer.backends.verl.setup_hook.setup_worker"
    ]


def test_a_webapp_run_logs_to_the_tracking_endpoint_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = RunConfig.from_preset(
        "grpo",
        task="arithmetic",
        backend="verl",
        executor="ray",
        **{
            "model.path": str(tmp_path / "model"),
            "data.train_path": str(tmp_path / "train.parquet"),
            "trainer.checkpoint_dir": str(tmp_path / "run" / "checkpoints"),
            "resources.gpus_per_node": 1,
            "optim.mini_batch_size": 8,
        },
    )
    paths = driver.shared_paths(config, tmp_path / "run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1/mlflow")
    assert "trainer.logger=[console,mlflow]" in driver.verl_command(config, paths)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert "trainer.logger=[console]" in driver.verl_command(config, paths)
