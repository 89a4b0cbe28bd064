"""Metric keys: namespaced names shared by the trainer and the UI (docs/contract.md#metric-keys).

A backend whose library logs some of the same quantities under its own names declares its aliases
(:meth:`trainer.backend_protocol.Backend.canonical_key`); ingestion stores such points under ours too, so
nothing downstream of it knows another library's spellings.
"""

from __future__ import annotations

__all__ = [
    "ACTOR_CLIPFRAC",
    "ACTOR_CLIPFRAC_LOWER",
    "ACTOR_ENTROPY",
    "ACTOR_GRAD_NORM",
    "ACTOR_KL",
    "ACTOR_LR",
    "ACTOR_PG_LOSS",
    "CRITIC_VALUE_LOSS",
    "EVAL_ACC",
    "EVAL_K",
    "EVAL_KEYS",
    "EVAL_PASS_AT_1",
    "EVAL_PASS_AT_K",
    "EVAL_PROMPTS",
    "EVAL_REWARD_MEAN",
    "IMPORT_SOURCE_TAG",
    "NUM_TURNS_MEAN",
    "PASS_THRESHOLD",
    "PERF_GENERATED_TOKENS",
    "PERF_SAMPLES_PER_S",
    "PERF_TOKENS_PER_S",
    "RESPONSE_LENGTH_MEAN",
    "REWARD_ERRORS",
    "REWARD_MAX",
    "REWARD_MEAN",
    "REWARD_MIN",
    "REWARD_STD",
    "ROLLOUT_EMPTY_TRAJECTORIES",
    "ROLLOUT_ZERO_VARIANCE_GROUPS",
    "SFT_KEYS",
    "SFT_LOSS",
    "SFT_TOKENS_PER_S",
    "SFT_TRAINED_TOKENS",
    "TIME_BREAKDOWN_KEYS",
    "TIMING_ADV_S",
    "TIMING_CHECKPOINT_S",
    "TIMING_ENV_S",
    "TIMING_GENERATE_S",
    "TIMING_OLD_LOG_PROB_S",
    "TIMING_REF_S",
    "TIMING_REWARD_S",
    "TIMING_ROLLOUT_S",
    "TIMING_STEP_S",
    "TIMING_SYNC_WEIGHTS_S",
    "TIMING_UPDATE_ACTOR_S",
    "TIMING_UPDATE_CRITIC_S",
    "TIMING_UPDATE_S",
    "TIMING_VALUES_S",
    "TIMING_VAL_S",
    "TOOLS_CALLS_PER_TRAJ",
    "TOOLS_CALL_RATE",
    "TOOLS_ERROR_RATE",
    "TOOLS_MALFORMED_RATE",
    "TOOLS_SUCCESS_RATE",
    "TOOLS_WELL_FORMED_RATE",
    "TOOL_USE_KEYS",
    "TRAJECTORY_ACC",
    "VAL_LOSS",
    "VAL_METRIC",
    "VAL_PREFIX",
    "val_key",
]

REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
REWARD_MAX = "reward/max"
REWARD_MIN = "reward/min"
RESPONSE_LENGTH_MEAN = "response_length/mean"  # generated tokens per trajectory (verl: the same key)
NUM_TURNS_MEAN = "num_turns/mean"
TOOLS_CALLS_PER_TRAJ = "tools/calls_per_traj"
TOOLS_ERROR_RATE = "tools/error_rate"
TOOLS_MALFORMED_RATE = "tools/malformed_rate"
# Tool use (docs/health.md#tool-use): the share of trajectories with at least one call attempt; of
# the attempts, the share that parsed and the share that returned without an error. The two shares of
# attempts are left out of a step that made none (a rate of nothing is not 0).
TOOLS_CALL_RATE = "tools/call_rate"
TOOLS_WELL_FORMED_RATE = "tools/well_formed_rate"
TOOLS_SUCCESS_RATE = "tools/success_rate"
TOOL_USE_KEYS = (TOOLS_CALL_RATE, TOOLS_WELL_FORMED_RATE, TOOLS_SUCCESS_RATE)
ROLLOUT_EMPTY_TRAJECTORIES = "rollout/empty_trajectories"
# Steps whose reward could not be computed (a remote reward that timed out or failed); they score 0.
REWARD_ERRORS = "reward/errors"
ACTOR_PG_LOSS = "actor/pg_loss"
ACTOR_KL = "actor/kl"  # KL to the reference policy, as the loss term computes it
ACTOR_ENTROPY = "actor/entropy"
ACTOR_CLIPFRAC = "actor/clipfrac"
ACTOR_CLIPFRAC_LOWER = "actor/clipfrac_lower"
ACTOR_GRAD_NORM = "actor/grad_norm"
ACTOR_LR = "actor/lr"
CRITIC_VALUE_LOSS = "critic/value_loss"
TIMING_ROLLOUT_S = "timing/rollout_s"
TIMING_UPDATE_S = "timing/update_s"
TIMING_STEP_S = "timing/step_s"
TIMING_VAL_S = "timing/val_s"
# Where a step's time goes (docs/health.md#time-breakdown): both backends report these parts of
# timing/step_s; what they leave unexplained is shown as waiting.
TIMING_GENERATE_S = "timing/generate_s"  # the model generating (engine or vLLM busy)
TIMING_ENV_S = "timing/env_s"  # environments and tools, between generations
TIMING_REWARD_S = "timing/reward_s"  # the reward function
TIMING_OLD_LOG_PROB_S = "timing/old_log_prob_s"  # the no-grad pass for π_old
TIMING_REF_S = "timing/ref_s"  # the reference model's pass
TIMING_VALUES_S = "timing/values_s"  # the critic's no-grad pass
TIMING_ADV_S = "timing/adv_s"  # the advantage estimator
TIMING_UPDATE_CRITIC_S = "timing/update_critic_s"
TIMING_UPDATE_ACTOR_S = "timing/update_actor_s"
TIMING_SYNC_WEIGHTS_S = "timing/sync_weights_s"  # verl: new weights to the rollout servers
TIMING_CHECKPOINT_S = "timing/checkpoint_s"
TIME_BREAKDOWN_KEYS: tuple[str, ...] = (
    TIMING_GENERATE_S,
    TIMING_ENV_S,
    TIMING_REWARD_S,
    TIMING_OLD_LOG_PROB_S,
    TIMING_REF_S,
    TIMING_VALUES_S,
    TIMING_ADV_S,
    TIMING_UPDATE_CRITIC_S,
    TIMING_UPDATE_ACTOR_S,
    TIMING_SYNC_WEIGHTS_S,
    TIMING_CHECKPOINT_S,
)
PERF_SAMPLES_PER_S = "perf/samples_per_s"
PERF_GENERATED_TOKENS = "perf/generated_tokens"
PERF_TOKENS_PER_S = "perf/tokens_per_s"  # generated tokens per second of generation time
ROLLOUT_ZERO_VARIANCE_GROUPS = "rollout/zero_variance_groups"  # share of groups whose rewards are all equal
VAL_PREFIX = "val/"
# An SFT run's (docs/sft.md#metrics): the mean loss per trained (assistant) token, on the step's batch
# and on the validation conversations; tokens per second through the forward and backward passes.
SFT_LOSS = "sft/loss"
SFT_TOKENS_PER_S = "sft/tokens_per_s"
SFT_TRAINED_TOKENS = "sft/trained_tokens"
VAL_LOSS = "val/loss"
SFT_KEYS = (SFT_LOSS, VAL_LOSS, SFT_TOKENS_PER_S, SFT_TRAINED_TOKENS)
VAL_METRIC = "acc"  # a trajectory's validation score: the reward function's acc, else its reward


# What an evaluation run reports once, at its last step (docs/evaluations.md#metrics). k is its
# samples per prompt (rollout.n); pass@1 and pass@k are the unbiased estimates of trainer.evaluation.
EVAL_ACC = "eval/acc"  # the mean of every sample's acc (VAL_METRIC's rule)
EVAL_PASS_AT_1 = "eval/pass@1"
EVAL_PASS_AT_K = "eval/pass@k"
EVAL_REWARD_MEAN = "eval/reward_mean"
EVAL_PROMPTS = "eval/prompts"
EVAL_K = "eval/k"
EVAL_KEYS = (EVAL_ACC, EVAL_PASS_AT_1, EVAL_PASS_AT_K, EVAL_REWARD_MEAN, EVAL_PROMPTS, EVAL_K)
# A sample passes (pass@k; a stored trajectory's success) when its acc is at least this.
PASS_THRESHOLD = 0.5
TRAJECTORY_ACC = "acc"  # the trajectory metric an evaluation records each sample's acc under


def val_key(task: str, metric: str = VAL_METRIC) -> str:
    """The validation key of one task: ``val/<task>/acc``."""
    return f"{VAL_PREFIX}{task}/{metric}"


# The MLflow tag a run imported by `studio import tensorboard|mlflow` carries: where it came from
# (``tensorboard:<folder>``, ``mlflow:<server>/<run id>``). The importer finds a run it made by it
# (docs/importers.md#resuming) and the runs table's Source column shows it.
IMPORT_SOURCE_TAG = "studio.import.source"
