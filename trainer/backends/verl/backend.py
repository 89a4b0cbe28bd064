"""The verl backend's declaration: what it refuses, what its launch needs, how verl spells our keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainer.backend_protocol import Job, LaunchEnv, Problem, ResumePoint, entrypoint_placement, trainer_argv
from trainer.backends.verl.command import prompts_per_mini_batch
from trainer.backends.verl.metric_keys import canonical_key
from trainer.backends.verl.needs import cluster_needs
from trainer.backends.verl.setup_hook import HOOK
from trainer.contract import (
    API_ENV,
    MLFLOW_ROOT,
    MLFLOW_RUN_ID_ENV,
    MLFLOW_TRACKING_TOKEN_ENV,
    MLFLOW_TRACKING_URI_ENV,
    PROJECT_ENV,
    RUN_ID_ENV,
    TOKEN_ENV,
)

if TYPE_CHECKING:
    import threading

    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

# Fields verl has no setting for, refused when they differ from RunConfig's default.
REFUSED: Mapping[str, str] = {
    # verl trains every group; its DAPO filter_groups refills dropped groups with new prompts instead.
    "algorithm.skip_zero_advantage_groups": "backend verl trains on every group, also those whose "
    "advantages are all zero: set algorithm.skip_zero_advantage_groups to false, or use backend torch",
    "trainer.num_threads": "backend verl leaves CPU threads to verl's workers: set trainer.num_threads "
    "to none, or use backend torch",
    # Its metrics leave through MLflow and its trajectories from the Ray workers, not the CLI's reporters.
    "evaluation.enabled": "backend verl does not evaluate (its trainer always updates): set "
    "evaluation.enabled to false, or use backend torch for an evaluation",
    "evaluation.checkpoint": "backend verl does not evaluate checkpoints: set evaluation.checkpoint to none, "
    "or use backend torch for an evaluation",
    "report.jsonl_path": "backend verl reports to the web app only (metrics through MLflow, trajectories "
    "from the Ray workers): set report.jsonl_path to none, or use backend torch",
    # Cancelling stops verl's trainer with SIGTERM, which saves nothing on its way out.
    "trainer.checkpoint_on_cancel": "backend verl writes no checkpoint when a run is cancelled: set "
    "trainer.checkpoint_on_cancel to false (checkpoints every trainer.save_every steps still are), or "
    "use backend torch",
    # One verl row per trajectory: every turn must extend the previous prompt (agent_loop.py).
    "rollout.context_policy": "backend verl trains each trajectory as one growing sequence: set "
    "rollout.context_policy to append, or use backend torch for a sliding window",
    # The tool-use rates come from the shared rollout metrics, which verl's agent loop does not pass on.
    "rollout.tool_warmup_steps": "backend verl does not report the tool-use rates the tool-use health "
    "checks judge: set rollout.tool_warmup_steps to 0, or use backend torch",
    # verl's multi-turn SFT dataset trains every assistant turn.
    "sft.train_turns": "backend verl's SFT trainer trains every assistant turn: set sft.train_turns to all, "
    "or use backend torch to train only the turns that call a tool",
    # verl reads weights from a model folder; it has no way to take our AdamW state in.
    "start_from.optimizer": "backend verl starts from a checkpoint's weights only: set "
    "start_from.optimizer to false, or use backend torch to keep the optimiser state",
}
STALL_HINT = "verl may be waiting for GPUs or CPUs the cluster cannot give it (see the job's log)"


class VerlBackend:
    name = "verl"
    description = "verl 0.9.1 on a Ray GPU cluster: vLLM rollouts, FSDP updates."
    refused: Mapping[str, str] = REFUSED

    def train(
        self, config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
    ) -> Any:
        """Run verl's trainer for ``config`` as a child process (see :func:`.driver.train`)."""
        from trainer.backends.verl.driver import train

        return train(config, reporter, stop_event=stop_event)

    def problems(self, config: RunConfig) -> list[Problem]:
        problems = []
        if config.trainer.device == "cpu":  # auto and cuda both mean verl's GPUs
            problems.append(
                (
                    "trainer.device",
                    "backend verl trains on GPUs: set trainer.device to auto, or use backend torch",
                )
            )
        return problems + _loss_problems(config) + _batch_problems(config)

    def check(self, config: RunConfig) -> list[Problem]:
        """verl's own ``validate_config`` on the command this run would get (imports verl and Hydra)."""
        if config.sft.enabled:
            from trainer.backends.verl.command import DUMMY_PATHS
            from trainer.backends.verl.sft_command import sft_problems

            return sft_problems(config, DUMMY_PATHS)
        from trainer.backends.verl.command import verl_problems

        return verl_problems(config)

    def job(self, config: RunConfig, env: LaunchEnv) -> Job:
        api = env.api_url.rstrip("/")
        # verl's workers run our agent loop, which reports trajectories to this run; verl's own
        # metrics reach the run through the MLflow-compatible endpoint with the same per-run token.
        variables = {
            TOKEN_ENV: env.token,
            RUN_ID_ENV: env.run_id,
            API_ENV: api,
            PROJECT_ENV: env.project,  # verl's trainer.project_name
            MLFLOW_TRACKING_URI_ENV: api + MLFLOW_ROOT,
            MLFLOW_TRACKING_TOKEN_ENV: env.token,
            # verl's Tracking attaches to this run instead of creating one (verl/utils/tracking.py).
            MLFLOW_RUN_ID_ENV: env.mlflow_run_id,
        }
        return Job(
            argv=trainer_argv(env),
            env=variables,
            # The entrypoint only supervises verl's main_ppo; verl's placement groups take the GPUs.
            num_cpus=config.resources.cpus,
            # verl's TaskRunner and every other worker of the job import our estimators and agent
            # loop through this hook (a job-level runtime_env field reaches every worker process).
            runtime_env={"worker_process_setup_hook": HOOK},
            needs=cluster_needs(config),
            stall_hint=STALL_HINT,
            **entrypoint_placement(config),
        )

    def resume_point(self, config: RunConfig) -> ResumePoint:
        from trainer.backends.verl.driver import verl_resume_point

        return verl_resume_point(config)

    def canonical_key(self, key: str) -> str | None:
        return canonical_key(key)


def _loss_problems(config: RunConfig) -> list[Problem]:
    """verl aggregates the KL and entropy terms over whole trajectory rows (docs/verl.md#policy-losses):
    the same as over steps, up to verl's mini-batch scale, except under seq-mean-token-mean."""
    algo = config.algorithm
    if algo.loss_agg_mode != "seq-mean-token-mean":
        return []
    terms = []
    if algo.kl_mode == "loss" and algo.kl_coef > 0:
        terms.append("a KL loss")
    if algo.entropy_coef > 0:
        terms.append("an entropy bonus")
    if not terms:
        return []
    return [
        (
            "algorithm.loss_agg_mode",
            f"backend verl averages {' and '.join(terms)} over whole trajectories, not over steps, under "
            "seq-mean-token-mean: set algorithm.loss_agg_mode to token-mean or seq-mean-token-sum, set "
            "algorithm.kl_mode to reward or none and algorithm.entropy_coef to 0, or use backend torch",
        )
    ]


def _batch_problems(config: RunConfig) -> list[Problem]:
    """How verl splits batches over GPUs, and what our mapping onto verl's batch sizes can express."""
    resources, n, mini = config.resources, config.rollout.n, config.optim.mini_batch_size
    if resources.gpus_per_node < 1:
        return [
            (
                "resources.gpus_per_node",
                "backend verl needs GPUs: set resources.gpus_per_node to 1 or more, or use backend torch",
            )
        ]
    world = resources.gpus_per_node * resources.nodes
    if config.sft.enabled:  # no rollouts: verl's SFT trainer splits conversations (sft_command.py)
        return _sft_batch_problems(config, world)
    problems = []
    trajectories = config.trainer.batch_size * n
    if trajectories % world:
        problems.append(
            (
                "trainer.batch_size",
                f"verl splits trainer.batch_size * rollout.n ({trajectories}) across {world} GPUs: set "
                f"trainer.batch_size so that batch_size * rollout.n is a multiple of {world}",
            )
        )
    if mini % n:
        problems.append(
            (
                "optim.mini_batch_size",
                f"verl counts mini-batches in prompts, each with its rollout.n ({n}) trajectories: set "
                f"optim.mini_batch_size to a multiple of {n}",
            )
        )
    elif prompts_per_mini_batch(config) * n < world:
        problems.append(
            (
                "optim.mini_batch_size",
                f"verl splits each mini-batch ({mini} trajectories) across {world} GPUs: set "
                f"optim.mini_batch_size to at least {world}",
            )
        )
    return problems


def _sft_batch_problems(config: RunConfig, world: int) -> list[Problem]:
    if config.trainer.batch_size % world:
        return [
            (
                "trainer.batch_size",
                f"verl's SFT trainer splits trainer.batch_size ({config.trainer.batch_size}) across {world} GPUs: "
                f"set trainer.batch_size to a multiple of {world}",
            )
        ]
    return []
