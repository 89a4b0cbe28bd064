"""The verl command builder and verl's own config checks, on CPU (verl 0.9.1 installed without GPU deps)."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_lib.registry import load_recipes
from trainer.algos.presets import PRESETS
from trainer.backends.verl import command as verl_command
from trainer.backends.verl.command import VerlPaths, command, field_for_error, overrides, verl_problems
from trainer.config import RunConfig, config_errors

load_recipes()  # each task's recipe defaults (HotpotQA's gamma, ALFWorld's 20 steps) reach verl's config
TASKS = ("arithmetic", "gsm8k", "hotpotqa", "alfworld", "webshop")
PATHS = VerlPaths(
    train_files="/shared/runs/7/data/train.parquet",
    val_files="/shared/runs/7/data/val.parquet",
    checkpoint_dir="/shared/runs/7/checkpoints",
    rollout_dir="/shared/runs/7/rollouts",
    validation_dir="/shared/runs/7/validation",
    agent_loop_config="/shared/runs/7/agent_loops.yaml",
)


def verl_config(preset: str, task: str = "gsm8k", **overrides: Any) -> RunConfig:
    n = PRESETS.get(preset).defaults["rollout.n"]
    settings: dict[str, Any] = {
        "resources.gpus_per_node": 8,
        "model.path": "/models/qwen3-4b",
        "trainer.batch_size": 8,
        "optim.mini_batch_size": 8 * n,  # one mini-batch of 8 prompts, each with its n samples
        "optim.micro_batch_size": 2,
        "trainer.checkpoint_dir": "/shared/runs/7/checkpoints",
        **overrides,
    }
    return RunConfig.from_preset(preset, task=task, backend="verl", executor="ray", **settings)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("preset", PRESETS.names())
def test_every_preset_and_task_passes_verls_own_validate_config(preset: str, task: str) -> None:
    assert verl_problems(verl_config(preset, task)) == []


def test_the_grpo_overrides_are_exactly_these() -> None:
    config = verl_config("grpo", "gsm8k", **{"data.val_path": "/tmp/val.parquet"})
    assert overrides(config, PATHS, project="demo", run_name="grpo-run7") == [
        "algorithm.adv_estimator=agent_r1_grpo",
        "algorithm.gamma=1.0",
        "algorithm.lam=1.0",
        "algorithm.norm_adv_by_std_in_grpo=true",
        "+algorithm.agent_r1.gigpo_step_weight=1.0",
        "+algorithm.agent_r1.token_signals=sample",
        "+algorithm.agent_r1.token_signals_per_step=4",
        "+algorithm.agent_r1.tokenizer=/models/qwen3-4b",
        "algorithm.use_kl_in_reward=false",
        "algorithm.kl_penalty=low_var_kl",
        "algorithm.kl_ctrl.type=fixed",
        "algorithm.kl_ctrl.kl_coef=0.0",
        "data.train_files=/shared/runs/7/data/train.parquet",
        "data.val_files=/shared/runs/7/data/val.parquet",
        "data.train_batch_size=8",
        "data.max_prompt_length=1024",
        "data.max_response_length=512",
        "data.shuffle=true",
        "data.seed=42",
        "data.val_max_samples=-1",
        "data.filter_overlong_prompts=true",
        "data.return_raw_chat=true",
        "actor_rollout_ref.actor.optim.lr=1e-06",
        "actor_rollout_ref.actor.optim.weight_decay=0.01",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=-1",
        "actor_rollout_ref.actor.grad_clip=1.0",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.clip_ratio_low=0.2",
        "actor_rollout_ref.actor.clip_ratio_high=0.2",
        "actor_rollout_ref.actor.clip_ratio_c=3.0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.policy_loss.loss_mode=agent_r1_vanilla",
        "actor_rollout_ref.actor.data_loader_seed=42",
        "actor_rollout_ref.model.path=/models/qwen3-4b",
        "actor_rollout_ref.model.trust_remote_code=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.seed=42",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.val_kwargs.n=1",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5",
        "actor_rollout_ref.rollout.agent.agent_loop_config_path=/shared/runs/7/agent_loops.yaml",
        "actor_rollout_ref.rollout.agent.default_agent_loop=agent_env_loop",
        "actor_rollout_ref.rollout.agent.num_workers=8",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.ref.fsdp_config.model_dtype=fp32",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
        "+critic.fsdp.mixed_precision.param_dtype=fp32",
        "critic.enable=false",
        "trainer.use_v1=true",
        "trainer.total_training_steps=10",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
        "trainer.val_before_train=false",
        "trainer.resume_mode=disable",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model]",
        "trainer.max_actor_ckpt_to_keep=1",
        "trainer.max_critic_ckpt_to_keep=1",
        "trainer.n_gpus_per_node=8",
        "trainer.nnodes=1",
        "trainer.logger=[console,mlflow]",
        "trainer.project_name='demo'",
        "trainer.experiment_name='grpo-run7'",
        "trainer.default_local_dir=/shared/runs/7/checkpoints",
        "trainer.rollout_data_dir=/shared/runs/7/rollouts",
        "trainer.validation_data_dir=/shared/runs/7/validation",
    ]


@pytest.mark.parametrize(
    ("preset", "estimator", "loss", "critic", "kl"),
    [
        ("ppo", "agent_r1_gae", "agent_r1_vanilla", "true", "none"),
        ("steppo", "agent_r1_gae", "agent_r1_gspo", "true", "none"),
        ("grpo", "agent_r1_grpo", "agent_r1_vanilla", "false", "loss"),
        ("rloo", "agent_r1_rloo", "agent_r1_vanilla", "false", "reward"),
        ("reinforce", "agent_r1_reinforce", "agent_r1_reinforce", "false", "reward"),
        ("gigpo", "agent_r1_gigpo", "agent_r1_vanilla", "false", "loss"),
    ],
)
def test_each_preset_maps_onto_our_estimator_and_loss_in_verl_and_verls_critic_and_kl(
    preset: str, estimator: str, loss: str, critic: str, kl: str
) -> None:
    values = dict(
        item.split("=", 1) for item in overrides(verl_config(preset), PATHS, project="p", run_name="r")
    )
    assert values["algorithm.adv_estimator"] == estimator
    assert values["actor_rollout_ref.actor.policy_loss.loss_mode"] == loss
    assert values["critic.enable"] == critic
    assert values["actor_rollout_ref.actor.use_kl_loss"] == ("true" if kl == "loss" else "false")
    assert values["algorithm.use_kl_in_reward"] == ("true" if kl == "reward" else "false")
    # Estimator settings travel in verl's algorithm config, nothing in the workers' environment.
    assert not [key for key in values if "env_vars" in key]


def test_the_command_runs_verls_main_ppo_with_the_overrides() -> None:
    config = verl_config("rloo")
    argv = command(config, PATHS, project="p", run_name="r", python="/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", "verl.trainer.main_ppo"]
    assert argv[3:] == overrides(config, PATHS, project="p", run_name="r")


def test_it_refuses_relative_paths_because_ray_workers_run_elsewhere() -> None:
    paths = VerlPaths(**{**PATHS.__dict__, "checkpoint_dir": "checkpoints"})
    with pytest.raises(ValueError, match="checkpoint_dir must be absolute"):
        overrides(verl_config("grpo"), paths, project="p", run_name="r")


def verl_errors(preset: str, **overrides: Any) -> dict[str, list[str]]:
    """RunConfig's validation errors for a verl config with dotted ``overrides``."""
    data = verl_config(preset).model_dump()
    for path, value in overrides.items():
        section, field = path.split(".")
        data[section][field] = value
    return config_errors(data)


def test_a_mini_batch_that_splits_a_group_is_put_on_the_mini_batch_field() -> None:
    # torch accepts 4 of 64 trajectories; verl counts mini-batches in whole prompts (8 samples).
    errors = verl_errors("grpo", **{"optim.mini_batch_size": 4})
    assert list(errors) == ["optim.mini_batch_size"]
    assert "multiple of 8" in errors["optim.mini_batch_size"][0]


def test_verls_own_batch_check_comes_back_on_the_batch_size_field() -> None:
    # RunConfig's own cross-field check refuses 12 prompts on 8 GPUs, so build the config without it
    # and let verl's validate_config be the one that objects.
    valid = verl_config("ppo")
    broken = valid.model_copy(update={"trainer": valid.trainer.model_copy(update={"batch_size": 12})})
    broken = broken.model_copy(update={"optim": valid.optim.model_copy(update={"mini_batch_size": 12})})
    problems = verl_problems(broken)
    assert len(problems) == 1
    field, message = problems[0]
    assert field == "trainer.batch_size"
    assert "real_train_batch_size (12) must be divisible by minimal possible batch size (8)" in message


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            "real_train_batch_size (12) must be divisible by minimal possible batch size (8)",
            "trainer.batch_size",
        ),
        ("[actor] Please set at least one of 'actor.ppo_micro_batch_size' or ...", "optim.micro_batch_size"),
        ("train_batch_size (2) must be >= actor.ppo_mini_batch_size (4)", "trainer.batch_size"),
        ("ppo_mini_batch_size (3) must be divisible by ppo_micro_batch_size (2)", "optim.micro_batch_size"),
        ("Invalid loss_agg_mode: x", "algorithm.loss_agg_mode"),
        ("something else entirely", "__all__"),
    ],
)
def test_verl_error_messages_map_to_the_field_that_sets_them(message: str, field: str) -> None:
    assert field_for_error(message) == field


def test_the_composed_config_carries_our_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    composed = verl_command.compose(verl_config("ppo", "hotpotqa"), PATHS)
    assert composed.algorithm.gamma == 0.99
    assert composed.critic.enable is True
    assert list(composed.trainer.logger) == ["console", "mlflow"]
    assert composed.actor_rollout_ref.rollout.prompt_length == 1024  # follows data.max_prompt_length
    assert composed.algorithm.adv_estimator == "agent_r1_gae"
    assert composed.algorithm.agent_r1.gigpo_step_weight == 1.0


def test_a_sliding_window_is_refused_for_verl_on_its_field() -> None:
    errors = verl_errors("grpo", **{"rollout.context_policy": "sliding_window"})
    assert list(errors) == ["rollout.context_policy"]
    assert "set rollout.context_policy to append" in errors["rollout.context_policy"][0]


@pytest.mark.parametrize(("dtype", "fsdp"), [("float32", "fp32"), ("bfloat16", "bf16")])
def test_model_dtype_reaches_vllm_and_every_fsdp_role(dtype: str, fsdp: str) -> None:
    config = verl_config("ppo", **{"model.dtype": dtype})
    assert verl_problems(config) == []
    composed = verl_command.compose(config, PATHS)
    roles = composed.actor_rollout_ref
    assert roles.rollout.dtype == dtype
    for engine in (roles.actor.fsdp_config, roles.ref.fsdp_config, composed.critic.fsdp):
        assert engine.mixed_precision.param_dtype == fsdp  # what verl's FSDP computes in
    # Trained weights stay fp32 masters, as on the torch backend; the reference only runs forward.
    assert (roles.actor.fsdp_config.model_dtype, composed.critic.fsdp.model_dtype) == ("fp32", "fp32")
    assert roles.ref.fsdp_config.model_dtype == fsdp


def test_the_critic_follows_gradient_checkpointing_and_warmup_like_the_actor() -> None:
    composed = verl_command.compose(
        verl_config("ppo", **{"model.gradient_checkpointing": False, "optim.warmup_steps": 3}), PATHS
    )
    assert composed.critic.model.enable_gradient_checkpointing is False  # verl's own default is true
    assert (
        composed.critic.optim.lr_warmup_steps == composed.actor_rollout_ref.actor.optim.lr_warmup_steps == 3
    )
