"""The rollout layer both backends share: which flow runs a row, how its answers are scored, what
ends a turn, and the metrics of a batch of trajectories.

The torch backend (:mod:`trainer.backends.torch.rollout`) gathers the flows of a batch over its own
engine; the verl backend (:mod:`trainer.backends.verl.agent_loop`) runs one flow per verl sample over
verl's server manager. Everything around that loop lives here, so a flow, a reward or a stop token
behaves the same on both.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainer.contract import (
    NUM_TURNS_MEAN,
    RESPONSE_LENGTH_MEAN,
    REWARD_ERRORS,
    REWARD_MAX,
    REWARD_MEAN,
    REWARD_MIN,
    REWARD_STD,
    ROLLOUT_EMPTY_TRAJECTORIES,
    ROLLOUT_ZERO_VARIANCE_GROUPS,
    TOOLS_CALL_RATE,
    TOOLS_CALLS_PER_TRAJ,
    TOOLS_ERROR_RATE,
    TOOLS_MALFORMED_RATE,
    TOOLS_SUCCESS_RATE,
    TOOLS_WELL_FORMED_RATE,
    val_key,
)
from trainer.flows import FLOWS, AgentFlowBase, flow_for_row
from trainer.llm import LLMClient
from trainer.mdp import Trajectory
from trainer.rewards import RewardError, score_step

if TYPE_CHECKING:
    from trainer.config import RunConfig

Row = dict[str, Any]

# Chat-template tokens that close a turn. Chat models do not always list theirs as EOS (in the
# tokenizer or in generation_config.json), yet a turn that ends on one has ended.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")

# -- flows --------------------------------------------------------------------------------------


def env_defaults(config: RunConfig) -> dict[str, Any]:
    """The run's env settings; a row's ``env_kwargs`` override them inside the flow."""
    defaults: dict[str, Any] = dict(config.rollout.env_kwargs)
    if config.rollout.tools:
        defaults.setdefault("tools", list(config.rollout.tools))
        defaults.setdefault("tool_format", config.rollout.tool_format)
    return defaults


def make_flow(row: Mapping[str, Any], engine: LLMClient, tokenizer: Any, config: RunConfig) -> AgentFlowBase:
    """The flow that runs ``row`` (its ``agent_name``, else the run's), generating through ``engine``."""
    flow_class = FLOWS.get(flow_for_row(row, config.rollout.agent_name))
    return flow_class(
        engine,
        tokenizer,
        max_steps=config.rollout.max_steps,
        max_prompt_length=config.data.max_prompt_length,
        context_policy=config.rollout.context_policy,
        window=config.rollout.window,
        env_type=config.rollout.env_type,
        env_defaults=env_defaults(config),
        max_response_length=config.data.max_response_length,
    )


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """The tokens that end a turn, one rule for both backends.

    The tokenizer's EOS, the model's generation EOS ids (``generation_config.eos_token_id``, an int
    or a list; chat models often put their turn end there) and the :data:`END_OF_TURN_TOKENS` the
    tokenizer knows. In order, without repeats.
    """
    ids: list[Any] = [tokenizer.eos_token_id]
    configured = getattr(generation_config, "eos_token_id", None)
    ids += configured if isinstance(configured, list) else [configured]
    unknown = getattr(tokenizer, "unk_token_id", None)
    for token in END_OF_TURN_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != unknown:
            ids.append(token_id)
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


# -- scoring ------------------------------------------------------------------------------------


def score_trajectory(trajectory: Trajectory, row: Mapping[str, Any]) -> None:
    """Fill every unscored step's reward from the reward function; keep its other fields in step.info.

    A reward that cannot be computed (RewardError: a remote endpoint that timed out) scores 0 and is
    recorded in ``step.info["reward_error"]``, counted in :data:`REWARD_ERRORS`; the run goes on."""
    extra_info = dict(row.get("extra_info") or {})
    data_source = str(row.get("data_source") or "")
    for step in trajectory.steps:
        if step.reward is None:
            try:
                step.reward, details = score_step(
                    data_source, step.response_text, trajectory.ground_truth, extra_info
                )
            except RewardError as error:
                step.reward, details = 0.0, {}
                step.info["reward_error"] = str(error)
            if details:
                step.info["reward_details"] = details


def score_rewards(trajectories: Sequence[Trajectory], rows: Sequence[Row], n: int) -> None:
    """Score a batch of n trajectories per row, ordered row by row (trajectory i belongs to row i // n)."""
    for index, trajectory in enumerate(trajectories):
        score_trajectory(trajectory, rows[index // n])


# -- metrics ------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, tool and length metrics of one batch (keys from :mod:`trainer.contract`)."""
    rewards = [t.total_reward for t in trajectories]
    calls = sum(t.metrics.get("tool_calls", 0.0) for t in trajectories)
    errors = sum(t.metrics.get("tool_errors", 0.0) for t in trajectories)
    malformed = sum(t.metrics.get("malformed_calls", 0.0) for t in trajectories)
    return {
        REWARD_MEAN: _mean(rewards),
        REWARD_STD: float(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        REWARD_MAX: max(rewards, default=0.0),
        REWARD_MIN: min(rewards, default=0.0),
        TOOLS_CALLS_PER_TRAJ: calls / max(len(trajectories), 1),
        TOOLS_ERROR_RATE: errors / calls if calls else 0.0,
        TOOLS_MALFORMED_RATE: malformed / calls if calls else 0.0,
        RESPONSE_LENGTH_MEAN: _mean([sum(len(s.response_ids) for s in t.steps) for t in trajectories]),
        NUM_TURNS_MEAN: _mean([float(len(t.steps)) for t in trajectories]),
        ROLLOUT_EMPTY_TRAJECTORIES: float(sum(not t.steps for t in trajectories)),
        REWARD_ERRORS: float(sum("reward_error" in s.info for t in trajectories for s in t.steps)),
        ROLLOUT_ZERO_VARIANCE_GROUPS: zero_variance_share(trajectories),
        **tool_use_metrics(trajectories),
    }


def tool_use_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Call rate, well-formed-call rate and tool success rate of one batch (docs/health.md#tool-use)."""
    attempts = [t.metrics.get("tool_calls", 0.0) for t in trajectories]
    calls = sum(attempts)
    metrics = {TOOLS_CALL_RATE: sum(a > 0 for a in attempts) / max(len(trajectories), 1)}
    if calls:
        malformed = sum(t.metrics.get("malformed_calls", 0.0) for t in trajectories)
        errors = sum(t.metrics.get("tool_errors", 0.0) for t in trajectories)
        metrics[TOOLS_WELL_FORMED_RATE] = (calls - malformed) / calls
        metrics[TOOLS_SUCCESS_RATE] = (calls - errors) / calls
    return metrics


def zero_variance_share(trajectories: Sequence[Trajectory]) -> float:
    """The share of groups (of two or more samples) whose rewards are all equal: their advantages are
    zero under GRPO-like estimators, so they teach nothing (docs/health.md#checks)."""
    groups: dict[str, set[float]] = {}
    sizes: dict[str, int] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.group_id, set()).add(trajectory.total_reward)
        sizes[trajectory.group_id] = sizes.get(trajectory.group_id, 0) + 1
    judged = [group for group, size in sizes.items() if size > 1]
    return sum(len(groups[group]) == 1 for group in judged) / len(judged) if judged else 0.0


def accuracy(trajectory: Trajectory) -> float:
    """A trajectory's validation accuracy: the reward function's ``acc`` when it gives one, else R(τ)."""
    for step in reversed(trajectory.steps):
        details = step.info.get("reward_details") or {}
        if "acc" in details:
            return float(details["acc"])
    return trajectory.total_reward


def validation_metrics(trajectories: Sequence[Trajectory], default_task: str) -> dict[str, float]:
    """``val/<task>/acc`` per data_source (the run's task for rows without one)."""
    by_task: dict[str, list[float]] = {}
    for trajectory in trajectories:
        by_task.setdefault(trajectory.data_source or default_task or "default", []).append(
            accuracy(trajectory)
        )
    return {val_key(task): _mean(values) for task, values in sorted(by_task.items())}
