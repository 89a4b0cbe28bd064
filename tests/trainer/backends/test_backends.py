"""Every backend refuses what it cannot honour with a message that says what to set, and declares
what its launch needs. What the torch backend honours it acts on: test_torch_honoured_fields.py.
"""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.backends.field_values import other_value, with_value
from trainer.algos.presets import PRESETS
from trainer.backends import BACKENDS, LaunchEnv
from trainer.backends.verl.command import VerlPaths, overrides
from trainer.backends.verl.setup_hook import HOOK
from trainer.config import RunConfig, backend_problems, field_paths, field_value, honoured_fields
from trainer.contract import MLFLOW_RUN_ID_ENV, MLFLOW_TRACKING_URI_ENV, RUN_ID_ENV, TOKEN_ENV

ROOT = Path(__file__).resolve().parents[3]
# A config each backend accepts as it is; the tests change one field at a time.
VALID = {
    "torch": RunConfig(),
    "verl": RunConfig.from_preset(
        "grpo", backend="verl", **{"resources.gpus_per_node": 1, "optim.mini_batch_size": 8}
    ),
}
PATHS = VerlPaths(
    train_files="/shared/data/train.parquet",
    val_files="/shared/data/val.parquet",
    checkpoint_dir="/shared/checkpoints",
    rollout_dir="/shared/rollouts",
    validation_dir="/shared/validation",
    agent_loop_config="/shared/agent_loops.yaml",
)
# verl fields our code reads from the RunConfig rather than verl's overrides: the run's name, task,
# preset, backend and executor (the CLI and the launcher), the flows inside verl's agent loop
# (agent_loop.py), the driver (stage, loggers) and the launcher (Job). trainer.device: auto and cuda
# both mean verl's GPUs (cpu is refused).
VERL_READ_BY_US = {
    *("name", "task", "preset", "backend", "executor", "resources.cpus", "trainer.device"),
    *("resources.memory_gb", "resources.where"),  # the Ray job's entrypoint asks Ray for them
    *("rollout.max_new_tokens", "rollout.window", "rollout.env_type", "rollout.tools", "rollout.tool_format"),
    *("rollout.env_kwargs", "data.train_path", "data.val_path", "data.rewards", "trainer.checkpoint_dir"),
    "data.reward_rule",  # the agent loop scores by it, in verl's workers
    "report.console",
    # The driver runs verl's SFT trainer instead (sft_command.py, test_verl_sft_command.py); the web
    # app resolves start_from.run and step to start_from.checkpoint, which reaches the model path.
    *("sft.enabled", "sft.max_length", "start_from.run", "start_from.step"),
}


@pytest.mark.parametrize("name", BACKENDS.names())
def test_a_field_a_backend_refuses_is_refused_on_that_field_with_what_to_set(name: str) -> None:
    refused = BACKENDS.get(name).refused
    assert set(refused) <= set(field_paths()), "refused names a field RunConfig does not have"
    assert honoured_fields(name) == set(field_paths()) - set(refused)
    base = VALID[name]
    assert backend_problems(base) == []
    silent = []
    for path in refused:
        assert field_value(base, path) == field_value(RunConfig(), path), f"{path}: start from its default"
        problems = backend_problems(with_value(base, path, other_value(base, path)))
        messages = [message for field, message in problems if field == path]
        if not messages or not all(f"backend {name}" in m and "set " in m for m in messages):
            silent.append(path)
    assert silent == [], f"backend {name} refuses without saying what to set: {silent}"


@pytest.mark.parametrize("preset", ["grpo", "ppo"])  # ppo: the critic's settings
def test_every_field_verl_honours_reaches_verls_command_or_our_code_in_its_workers(preset: str) -> None:
    base = VALID["verl"].with_overrides(
        preset=preset, **{"algorithm.estimator": PRESETS.get(preset).estimator}
    )
    unused = [
        path
        for path in sorted(honoured_fields("verl") - VERL_READ_BY_US)
        if overrides(with_value(base, path, other_value(base, path)), PATHS, project="p", run_name="r")
        == overrides(base, PATHS, project="p", run_name="r")
    ]
    expected = [] if preset == "ppo" else ["optim.critic_lr"]  # grpo trains no critic
    assert unused == expected


STEP_MEAN_ENTROPY = {
    "algorithm.loss_agg_mode": "seq-mean-token-mean",
    "algorithm.kl_mode": "none",
    "algorithm.entropy_coef": 0.01,
}


@pytest.mark.parametrize(
    ("backend", "changes", "path"),
    [
        ("torch", {"resources.gpus_per_node": 2}, "resources.gpus_per_node"),
        ("verl", {"trainer.device": "cpu"}, "trainer.device"),
        ("verl", {"rollout.context_policy": "sliding_window"}, "rollout.context_policy"),
        # grpo's KL loss: verl aggregates it over trajectory rows, which this mode tells from steps
        ("verl", {"algorithm.loss_agg_mode": "seq-mean-token-mean"}, "algorithm.loss_agg_mode"),
        ("verl", STEP_MEAN_ENTROPY, "algorithm.loss_agg_mode"),
    ],
)
def test_values_a_backend_cannot_honour_are_refused_on_their_field(
    backend: str, changes: dict[str, Any], path: str
) -> None:
    config = VALID[backend]
    for field, value in changes.items():
        config = with_value(config, field, value)
    assert [field for field, _ in backend_problems(config)] == [path]
    assert field_value(config, path) == changes[path]


ENV = LaunchEnv(
    run_id="7", api_url="http://web:8000/", token="r7_secret", project="demo", mlflow_run_id="abc"
)


@pytest.mark.parametrize("backend", ["torch", "verl"])
def test_a_jobs_memory_and_where_to_run_are_asked_of_ray_for_its_entrypoint(backend: str) -> None:
    where = {"resources.memory_gb": 1.5, "resources.where": {"node_a": 1, "fast_disk": 0.5}}
    job = BACKENDS.get(backend).job(VALID[backend].with_overrides(executor="ray", **where), ENV)
    assert (job.memory_bytes, dict(job.resources)) == (int(1.5 * 2**30), {"node_a": 1, "fast_disk": 0.5})


def test_a_torch_job_trains_in_its_entrypoint_and_gets_only_its_token() -> None:
    config = RunConfig.from_preset(
        "grpo", executor="ray", **{"resources.gpus_per_node": 1, "resources.cpus": 3}
    )
    job = BACKENDS.get("torch").job(config, ENV)
    assert job.argv == ("-m", "trainer", "run", "--run-id", "7", "--api", "http://web:8000/")
    assert dict(job.env) == {TOKEN_ENV: "r7_secret"}
    assert (job.num_cpus, job.num_gpus, dict(job.runtime_env), job.needs, job.stall_hint) == (
        3,
        1,
        {},
        None,
        "",
    )


def test_a_verl_job_hands_its_workers_the_run_and_mlflow_and_declares_its_cluster_needs() -> None:
    job = BACKENDS.get("verl").job(VALID["verl"], ENV)
    assert job.env[RUN_ID_ENV] == "7" and job.env[TOKEN_ENV] == "r7_secret"
    assert (job.env[MLFLOW_TRACKING_URI_ENV], job.env[MLFLOW_RUN_ID_ENV]) == ("http://web:8000/mlflow", "abc")
    assert dict(job.runtime_env) == {"worker_process_setup_hook": HOOK}
    assert job.num_gpus == 0  # verl's placement groups hold the GPUs, not the entrypoint
    assert job.needs is not None and (job.needs.gpus_per_node, job.needs.cpus_per_node) == (1, 3)
    assert "verl may be waiting for GPUs" in job.stall_hint


def test_the_backend_choices_are_the_registrys_names() -> None:
    assert list(typing.get_args(RunConfig.model_fields["backend"].annotation)) == BACKENDS.names()


def test_the_registry_imports_neither_torch_nor_verl() -> None:
    code = (
        "import sys, trainer.backends, trainer.config; print('torch' in sys.modules, 'verl' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
