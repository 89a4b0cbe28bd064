"""The torch backend's declaration: what it honours, what it refuses, what its launch needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.backends.base import COMMON_FIELDS, Job, LaunchEnv, Problem, trainer_argv
from trainer.contract import TOKEN_ENV

if TYPE_CHECKING:
    import threading

    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter


class TorchBackend:
    name = "torch"
    description = "One process, Hugging Face transformers, CPU or one GPU (the embedded default)."
    honoured = COMMON_FIELDS | {
        "model.path", "model.dtype", "model.trust_remote_code", "model.gradient_checkpointing",
        "model.lora_rank", "model.lora_alpha",
        "data.train_path", "data.val_path", "data.max_prompt_length", "data.max_response_length",
        "data.shuffle", "data.val_max_samples", "data.rewards",
        "rollout.n", "rollout.temperature", "rollout.top_p", "rollout.max_new_tokens", "rollout.max_steps",
        "rollout.agent_name", "rollout.context_policy", "rollout.window", "rollout.env_type",
        "rollout.tools", "rollout.tool_format", "rollout.env_kwargs",
        "algorithm.estimator", "algorithm.policy_loss", "algorithm.gamma", "algorithm.lam",
        "algorithm.norm_adv_by_std", "algorithm.kl_mode", "algorithm.kl_coef", "algorithm.kl_kind",
        "algorithm.clip_low", "algorithm.clip_high", "algorithm.dual_clip_c", "algorithm.loss_agg_mode",
        "algorithm.entropy_coef", "algorithm.gigpo_step_weight", "algorithm.skip_zero_advantage_groups",
        "optim.lr", "optim.critic_lr", "optim.weight_decay", "optim.grad_clip", "optim.ppo_epochs",
        "optim.mini_batch_size", "optim.micro_batch_size", "optim.warmup_steps",
        "trainer.total_steps", "trainer.batch_size", "trainer.seed", "trainer.val_every",
        "trainer.save_every", "trainer.checkpoint_dir", "trainer.resume", "trainer.keep_checkpoints",
        "trainer.device", "trainer.num_threads",
        "resources.gpus_per_node",  # one GPU at most (see problems), held by the job's entrypoint
        "report.jsonl_path", "report.console", "report.token_signals", "report.token_signals_per_step",
        "evaluation.enabled", "evaluation.checkpoint",
    }  # fmt: skip

    def train(
        self, config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
    ) -> Any:
        if config.evaluation.enabled:
            from trainer.backends.torch.evaluate import evaluate

            return evaluate(config, reporter, stop_event=stop_event)
        from trainer.backends.torch.loop import train

        return train(config, reporter, stop_event=stop_event)

    def problems(self, config: RunConfig) -> list[Problem]:
        resources, problems = config.resources, []
        if resources.nodes > 1:
            problems.append(
                (
                    "resources.nodes",
                    "backend torch runs in one process: set resources.nodes to 1, or use backend verl",
                )
            )
        if resources.gpus_per_node > 1:
            problems.append(
                (
                    "resources.gpus_per_node",
                    "backend torch trains on one GPU: set resources.gpus_per_node to 0 or 1, or use backend verl",
                )
            )
        if config.executor == "ray" and config.trainer.device == "cuda" and resources.gpus_per_node < 1:
            problems.append(
                (
                    "resources.gpus_per_node",
                    "trainer.device is cuda on a Ray job that asks for no GPU: set resources.gpus_per_node to 1",
                )
            )
        return problems

    def check(self, config: RunConfig) -> list[Problem]:
        return []  # problems() says all there is to say

    def job(self, config: RunConfig, env: LaunchEnv) -> Job:
        # The trainer trains inside the job's entrypoint, so the entrypoint holds the GPU.
        return Job(
            argv=trainer_argv(env),
            env={TOKEN_ENV: env.token},
            num_cpus=config.resources.cpus,
            num_gpus=config.resources.gpus_per_node,
        )
