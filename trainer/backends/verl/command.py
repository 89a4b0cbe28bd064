"""RunConfig → the ``python -m verl.trainer.main_ppo`` command (Hydra overrides), and verl's own checks.

Pure functions: nothing here starts Ray or touches a GPU. :func:`verl_problems` composes verl's real
``ppo_trainer`` config with our overrides and runs verl's ``validate_config`` so the experiment form
can put verl's objections on our fields.

verl counts batches in prompts (``data.train_batch_size``, ``ppo_mini_batch_size``) and multiplies by
``rollout.n`` itself; RunConfig counts mini-batches in trajectories. Micro-batch sizes are per GPU
in verl and count trajectory rows (one row = every turn of one trajectory, see ``agent_loop.py``).

    python -m trainer.backends.verl.command CONFIG.yaml --shared-dir DIR   prints the command
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.contract import POLICY_FOLDER

if TYPE_CHECKING:
    from trainer.config import RunConfig

# verl runs our estimators and policy losses, not its own: trainer.backends.verl.estimators and
# .losses register each one under this prefix (the job's setup hook installs them), so a preset means
# the same math on both backends.
PREFIX = "agent_r1_"
# Our key in verl's algorithm config for what verl's fields do not say (gamma, lam and
# norm_adv_by_std_in_grpo are verl's own); verl hands that config to every estimator
# (docs/verl.md#advantages).
ALGORITHM_KEY = "agent_r1"
STEP_WEIGHT_KEY = "gigpo_step_weight"
# What the driver's token-signal report reads there (trainer.backends.verl.signals).
SIGNALS_KEY = "token_signals"
SIGNALS_PER_STEP_KEY = "token_signals_per_step"
TOKENIZER_KEY = "tokenizer"
LOGGERS = ("console", "mlflow")
# model.dtype as verl spells it: FSDP's compute dtype (mixed_precision.param_dtype) and vLLM's dtype.
FSDP_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
AGENT_LOOP_WORKERS = 8  # verl's default rollout.agent.num_workers (one CPU each on the cluster)


@dataclass(frozen=True)
class VerlPaths:
    """Absolute paths on storage that every Ray node sees."""

    train_files: str
    val_files: str | None
    checkpoint_dir: str
    rollout_dir: str
    validation_dir: str
    agent_loop_config: str


def hydra_value(value: Any) -> str:
    """A Hydra override value: bools lower-case, None as null, floats in round-trip form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def start_model_path(config: RunConfig) -> str:
    """The weights the run starts from: its start_from checkpoint's policy/ (docs/sft.md#start-from),
    else model.path. The critic and the tokenizer keep model.path's."""
    if config.start_from.checkpoint:
        return f"{config.start_from.checkpoint.rstrip('/')}/{POLICY_FOLDER}"
    return config.model.path


def prompts_per_mini_batch(config: RunConfig) -> int:
    """verl's ``ppo_mini_batch_size`` (prompts); exact when optim.mini_batch_size is a multiple of n."""
    return max(1, config.optim.mini_batch_size // config.rollout.n)


def verl_estimator_name(estimator: str) -> str:
    """The name our estimator ``estimator`` has in verl's estimator registry."""
    return PREFIX + estimator


def verl_loss_name(loss: str) -> str:
    """The name our policy loss ``loss`` has in verl's policy-loss registry."""
    return PREFIX + loss


def _algorithm(config: RunConfig) -> dict[str, Any]:
    algo = config.algorithm
    in_reward = algo.kl_mode == "reward"
    return {
        "algorithm.adv_estimator": verl_estimator_name(algo.estimator),
        "algorithm.gamma": algo.gamma,
        "algorithm.lam": algo.lam,
        "algorithm.norm_adv_by_std_in_grpo": algo.norm_adv_by_std,
        f"+algorithm.{ALGORITHM_KEY}.{STEP_WEIGHT_KEY}": algo.gigpo_step_weight,
        f"+algorithm.{ALGORITHM_KEY}.{SIGNALS_KEY}": config.report.token_signals or "sample",
        f"+algorithm.{ALGORITHM_KEY}.{SIGNALS_PER_STEP_KEY}": config.report.token_signals_per_step,
        f"+algorithm.{ALGORITHM_KEY}.{TOKENIZER_KEY}": config.model.path,
        "algorithm.use_kl_in_reward": in_reward,
        "algorithm.kl_penalty": algo.kl_kind,
        "algorithm.kl_ctrl.type": "fixed",
        "algorithm.kl_ctrl.kl_coef": algo.kl_coef if in_reward else 0.0,
    }


def _data(config: RunConfig, paths: VerlPaths) -> dict[str, Any]:
    return {
        "data.train_files": paths.train_files,
        "data.val_files": paths.val_files or paths.train_files,
        "data.train_batch_size": config.trainer.batch_size,
        "data.max_prompt_length": config.data.max_prompt_length,
        "data.max_response_length": config.data.max_response_length,
        "data.shuffle": config.data.shuffle,
        "data.seed": config.trainer.seed,
        "data.val_max_samples": config.data.val_max_samples or -1,
        # A prompt over the limit ends our episode before any step; verl cannot train an empty
        # response, so such rows are dropped when the dataset loads.
        "data.filter_overlong_prompts": True,
        "data.return_raw_chat": True,
    }


def _actor(config: RunConfig) -> dict[str, Any]:
    algo, optim = config.algorithm, config.optim
    in_loss = algo.kl_mode == "loss"
    prefix = "actor_rollout_ref.actor."
    values = {
        "optim.lr": optim.lr,
        "optim.weight_decay": optim.weight_decay,
        "optim.lr_warmup_steps": optim.warmup_steps if optim.warmup_steps > 0 else -1,
        "grad_clip": optim.grad_clip,
        "ppo_epochs": optim.ppo_epochs,
        "ppo_mini_batch_size": prompts_per_mini_batch(config),
        "ppo_micro_batch_size_per_gpu": optim.micro_batch_size,
        "use_kl_loss": in_loss,
        "kl_loss_coef": algo.kl_coef if in_loss else 0.0,
        "kl_loss_type": algo.kl_kind,
        "entropy_coeff": algo.entropy_coef,
        "clip_ratio_low": algo.clip_low,
        "clip_ratio_high": algo.clip_high,
        "clip_ratio_c": algo.dual_clip_c,
        "loss_agg_mode": algo.loss_agg_mode,
        "policy_loss.loss_mode": verl_loss_name(algo.policy_loss),
        "data_loader_seed": config.trainer.seed,
    }
    return {prefix + key: value for key, value in values.items()}


def _dtype(config: RunConfig) -> dict[str, Any]:
    """model.dtype on every role, as the torch backend reads it: the actor and the critic compute in it
    and keep fp32 master weights (verl's fsdp model_dtype stays fp32); the reference, which only runs
    forward passes, holds its weights in it; vLLM samples in it."""
    fsdp = FSDP_DTYPES[config.model.dtype]
    values: dict[str, Any] = {
        "actor_rollout_ref.rollout.dtype": config.model.dtype,
        "actor_rollout_ref.ref.fsdp_config.model_dtype": fsdp,
    }
    # verl's FSDPEngineConfig.mixed_precision is absent from its YAML (None: bf16 compute), hence "+".
    for engine in ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.fsdp"):
        values[f"+{engine}.mixed_precision.param_dtype"] = fsdp
    return values


def _model_and_rollout(config: RunConfig, paths: VerlPaths) -> dict[str, Any]:
    rollout, micro = config.rollout, config.optim.micro_batch_size
    return {
        "actor_rollout_ref.model.path": start_model_path(config),
        "actor_rollout_ref.model.trust_remote_code": config.model.trust_remote_code,
        "actor_rollout_ref.model.enable_gradient_checkpointing": config.model.gradient_checkpointing,
        # verl's FSDP LoRA: adapters on every linear layer, as ours (target_modules all-linear).
        "actor_rollout_ref.model.lora_rank": config.model.lora_rank,
        "actor_rollout_ref.model.lora_alpha": config.model.lora_alpha,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        # One vLLM engine per GPU: the tiny and small models this product targets fit on one.
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.n": rollout.n,
        "actor_rollout_ref.rollout.temperature": rollout.temperature,
        "actor_rollout_ref.rollout.top_p": rollout.top_p,
        "actor_rollout_ref.rollout.seed": config.trainer.seed,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.val_kwargs.n": 1,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": False,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": rollout.max_steps,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": paths.agent_loop_config,
        "actor_rollout_ref.rollout.agent.default_agent_loop": rollout.agent_name,
        "actor_rollout_ref.rollout.agent.num_workers": AGENT_LOOP_WORKERS,
    }


def _critic(config: RunConfig) -> dict[str, Any]:
    if not config.use_critic:
        return {"critic.enable": False}
    return {
        "critic.enable": True,
        "critic.model.path": config.model.path,
        "critic.model.trust_remote_code": config.model.trust_remote_code,
        "critic.model.enable_gradient_checkpointing": config.model.gradient_checkpointing,
        "critic.optim.lr": config.optim.critic_lr,
        "critic.optim.weight_decay": config.optim.weight_decay,
        "critic.optim.lr_warmup_steps": config.optim.warmup_steps if config.optim.warmup_steps > 0 else -1,
        "critic.grad_clip": config.optim.grad_clip,
        "critic.ppo_micro_batch_size_per_gpu": config.optim.micro_batch_size,
    }


def _trainer(
    config: RunConfig, paths: VerlPaths, project: str, run_name: str, loggers: Sequence[str]
) -> dict[str, Any]:
    trainer = config.trainer
    return {
        # verl's default; said here because our estimators' hook wraps the v1 trainer
        # (docs/verl.md#advantages).
        "trainer.use_v1": True,
        **schedule(config, paths),
        "trainer.val_before_train": False,
        **resume_and_contents(config, "actor_rollout_ref.actor.checkpoint.save_contents"),
        "trainer.max_actor_ckpt_to_keep": trainer.keep_checkpoints,
        "trainer.max_critic_ckpt_to_keep": trainer.keep_checkpoints,
        **placement_and_names(config, paths, project, run_name, loggers),
        "trainer.rollout_data_dir": paths.rollout_dir,
        "trainer.validation_data_dir": paths.validation_dir,
    }


def schedule(config: RunConfig, paths: VerlPaths) -> dict[str, Any]:
    """How long verl's RL and SFT trainers run, and how often they save and validate: verl saves at
    every multiple of save_freq and always at the last step (0 = the end only); no validation file,
    no validation."""
    trainer, total = config.trainer, config.trainer.total_steps
    return {
        "trainer.total_training_steps": total,
        "trainer.save_freq": trainer.save_every if trainer.save_every > 0 else total,
        "trainer.test_freq": (trainer.val_every if trainer.val_every > 0 else total)
        if paths.val_files
        else -1,
    }


def resume_and_contents(config: RunConfig, contents_key: str, *, also: Sequence[str] = ()) -> dict[str, Any]:
    """verl's resume mode and what its checkpoints hold (``contents_key``): the weights, plus the
    optimizer and extra states only when the run is resumable, as on the torch backend
    (docs/checkpoints.md); ``also`` names more contents (the SFT trainer's hf_model)."""
    resume = config.trainer.resume
    contents = ["model", *(["optimizer", "extra"] if resume else []), *also]
    return {
        "trainer.resume_mode": "auto" if resume else "disable",
        contents_key: "[" + ",".join(contents) + "]",
    }


def placement_and_names(
    config: RunConfig, paths: VerlPaths, project: str, run_name: str, loggers: Sequence[str]
) -> dict[str, Any]:
    """Where verl's RL and SFT trainers run, what they log to under which names, and where they save."""
    return {
        "trainer.n_gpus_per_node": config.resources.gpus_per_node,
        "trainer.nnodes": config.resources.nodes,
        "trainer.logger": "[" + ",".join(loggers) + "]",
        "trainer.project_name": hydra_quoted(project),
        "trainer.experiment_name": hydra_quoted(run_name),
        "trainer.default_local_dir": paths.checkpoint_dir,
    }


def hydra_quoted(text: str) -> str:
    """A Hydra string value that may hold spaces, commas, brackets or quotes."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides(
    config: RunConfig, paths: VerlPaths, *, project: str, run_name: str, loggers: Sequence[str] = LOGGERS
) -> list[str]:
    """Hydra overrides that make verl's ``ppo_trainer`` config train ``config``.

    ``loggers`` keeps mlflow for webapp runs (their metrics reach the run through the MLflow-compatible
    endpoint); a run with no tracking server (the GPU smoke run) logs to the console only.
    """
    for name in ("train_files", "checkpoint_dir", "rollout_dir", "validation_dir", "agent_loop_config"):
        if not os.path.isabs(getattr(paths, name)):
            raise ValueError(f"VerlPaths.{name} must be absolute (Ray workers run elsewhere)")
    values: dict[str, Any] = {}
    for part in (
        _algorithm(config),
        _data(config, paths),
        _actor(config),
        _model_and_rollout(config, paths),
        _dtype(config),
        _critic(config),
        _trainer(config, paths, project, run_name, loggers),
    ):
        values.update(part)
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def command(
    config: RunConfig,
    paths: VerlPaths,
    *,
    project: str,
    run_name: str,
    python: str = "python",
    loggers: Sequence[str] = LOGGERS,
) -> list[str]:
    """The argv that runs verl's trainer for ``config``."""
    return [
        python,
        "-m",
        "verl.trainer.main_ppo",
        *overrides(config, paths, project=project, run_name=run_name, loggers=loggers),
    ]


# -- verl's own checks ----------------------------------------------------------------------------

DUMMY_PATHS = VerlPaths(
    train_files="/shared/data/train.parquet",
    val_files="/shared/data/val.parquet",
    checkpoint_dir="/shared/checkpoints",
    rollout_dir="/shared/rollouts",
    validation_dir="/shared/validation",
    agent_loop_config="/shared/agent_loops.yaml",
)

# verl's words in an error message → the RunConfig field that sets them (first match wins).
_ERROR_FIELDS: tuple[tuple[str, str], ...] = (
    (r"real_train_batch_size|minimal possible batch size|train_batch_size", "trainer.batch_size"),
    (r"micro_batch_size", "optim.micro_batch_size"),
    (r"mini_batch_size", "optim.mini_batch_size"),
    (r"loss_agg_mode", "algorithm.loss_agg_mode"),
    (r"temperature|do_sample", "rollout.temperature"),
    (r"n_gpus|nnodes|n_gpus_per_node", "resources.gpus_per_node"),
    (r"loss_mode|policy loss", "algorithm.policy_loss"),
    (r"adv_estimator|estimator", "algorithm.estimator"),
)


def field_for_error(message: str) -> str:
    """The RunConfig field a verl config error is about ("__all__" when none matches)."""
    for pattern, field in _ERROR_FIELDS:
        if re.search(pattern, message):
            return field
    return "__all__"


@functools.cache
def verl_config_dir() -> str:
    import verl

    return str(Path(verl.__file__).parent / "trainer" / "config")


@functools.cache
def _stand_in_model() -> str:
    """A folder holding only a tiny Llama config.json.

    verl's checks build the critic's HFModelConfig, which reads the model's config from disk; the
    real model usually lives on the cluster, and its architecture is not what these checks are about.
    """
    folder = Path(tempfile.mkdtemp(prefix="agent-r1-verl-check-"))
    stand_in = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 256,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    }
    (folder / "config.json").write_text(json.dumps(stand_in), encoding="utf-8")
    return str(folder)


def compose(config: RunConfig, paths: VerlPaths = DUMMY_PATHS, *, extra: Sequence[str] = ()) -> Any:
    """verl's ``ppo_trainer`` DictConfig with our overrides (then ``extra``) applied (Hydra, no Ray)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        ours = overrides(config, paths, project="p", run_name="r")
        return hydra_compose("ppo_trainer", overrides=[*ours, *extra])


def _check_overrides() -> list[str]:
    model = _stand_in_model()
    return [
        f"actor_rollout_ref.model.path={model}",
        f"critic.model.path={model}",
        "+critic.model.load_tokenizer=false",
    ]


def verl_problems(config: RunConfig) -> list[tuple[str, str]]:
    """verl's objections to a valid verl ``config`` as (RunConfig field path, message); [] when verl
    accepts it. What our mapping cannot express is refused earlier, by RunConfig's validation
    (:meth:`VerlBackend.problems <trainer.backends.verl.backend.VerlBackend.problems>`).

    Runs verl's own ``validate_config`` as ``main_ppo`` does (with its role flags). About a second
    warm; the first call in a process also imports Hydra and verl (a few seconds).
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        composed = compose(config, extra=_check_overrides())
        # validate_config prints its verdict; a form check must not write to stdout.
        with contextlib.redirect_stdout(io.StringIO()):
            validate_config(
                config=composed,
                use_reference_policy=need_reference_policy(composed),
                use_critic=need_critic(composed),
            )
    except Exception as error:  # verl raises AssertionError, ValueError and Hydra errors alike
        message = str(error) or type(error).__name__
        return [(field_for_error(message), f"verl rejects this config: {message}")]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.backends.verl.command", description="Print the verl command for a config."
    )
    parser.add_argument("config", type=Path, help="RunConfig YAML (backend verl)")
    parser.add_argument("--shared-dir", type=Path, required=True, help="storage every Ray node sees")
    parser.add_argument("--project", default="agent-r1-studio")
    parser.add_argument("--run-name", default=None)
    args = parser.parse_args(argv)
    from trainer.config import RunConfig

    config = RunConfig.from_yaml_file(args.config)
    paths = shared_paths(config, args.shared_dir.resolve())
    argv_out = command(config, paths, project=args.project, run_name=args.run_name or config.name)
    print(shlex.join(argv_out))
    return 0


def shared_paths(config: RunConfig, shared_dir: Path) -> VerlPaths:
    """The standard layout under one run's shared folder (data/, checkpoints/, rollouts/, ...)."""
    return VerlPaths(
        train_files=str(shared_dir / "data" / "train.parquet"),
        val_files=str(shared_dir / "data" / "val.parquet") if config.data.val_path else None,
        checkpoint_dir=str(shared_dir / "checkpoints"),
        rollout_dir=str(shared_dir / "rollouts"),
        validation_dir=str(shared_dir / "validation"),
        agent_loop_config=str(shared_dir / "agent_loops.yaml"),
    )


if __name__ == "__main__":
    sys.exit(main())
