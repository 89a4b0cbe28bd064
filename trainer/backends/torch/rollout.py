"""Rollout: run n samples of every prompt through its flow concurrently, then score the final answers.

Every trajectory is one ``flow.run`` coroutine; all of them share the generation engine, which batches
whatever they ask for at the same time. Steps whose reward is None (final answers) are scored with the
reward function of the row's ``data_source``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainer.flows import FLOWS, AgentFlowBase, flow_for_row
from trainer.llm import LLMClient, SamplingParams
from trainer.mdp import Trajectory
from trainer.rewards import score_step

if TYPE_CHECKING:
    from trainer.config import RunConfig

Row = dict[str, Any]


def env_defaults(config: RunConfig) -> dict[str, Any]:
    """The run's env settings; a row's ``env_kwargs`` override them inside the flow."""
    defaults: dict[str, Any] = dict(config.rollout.env_kwargs)
    if config.rollout.tools:
        defaults.setdefault("tools", list(config.rollout.tools))
        defaults.setdefault("tool_format", config.rollout.tool_format)
    return defaults


def make_flow(row: Mapping[str, Any], engine: LLMClient, tokenizer: Any, config: RunConfig) -> AgentFlowBase:
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


def score_trajectory(trajectory: Trajectory, row: Mapping[str, Any]) -> None:
    """Fill every unscored step's reward from the reward function; keep its other fields in step.info."""
    extra_info = dict(row.get("extra_info") or {})
    data_source = str(row.get("data_source") or "")
    for step in trajectory.steps:
        if step.reward is None:
            step.reward, details = score_step(
                data_source, step.response_text, trajectory.ground_truth, extra_info
            )
            if details:
                step.info["reward_details"] = details


async def _run_one(
    row: Row,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    *,
    traj_id: str,
    group_id: str,
    rollout_index: int,
) -> Trajectory:
    flow = make_flow(row, engine, tokenizer, config)
    # The torch engine batches best when it knows how many flows are live; other clients need not.
    track = getattr(engine, "track", None)
    with track() if track is not None else contextlib.nullcontext():
        output = await flow.run(sampling, **row)
    return output.to_trajectory(row, traj_id=traj_id, group_id=group_id, rollout_index=rollout_index)


async def _rollout(
    rows: Sequence[Row],
    n: int,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    tag: str,
) -> list[Trajectory]:
    # Rows are grouped by position, not by extra_info.index: a small dataset may put one row in a
    # batch twice, and those are two prompts with two baselines.
    runs = [
        _run_one(
            row,
            sampling,
            engine,
            tokenizer,
            config,
            traj_id=f"{tag}-p{i}-s{k}",
            group_id=f"{tag}-p{i}",
            rollout_index=k,
        )
        for i, row in enumerate(rows)
        for k in range(n)
    ]
    return list(await asyncio.gather(*runs))


def rollout(
    rows: Sequence[Row],
    *,
    n: int,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    tag: str,
) -> list[Trajectory]:
    """n trajectories per row, ordered row by row and sample by sample; final answers not yet scored."""
    return asyncio.run(_rollout(rows, n, sampling, engine, tokenizer, config, tag))


def score_rewards(trajectories: Sequence[Trajectory], rows: Sequence[Row], n: int) -> None:
    """Score the final answers of :func:`rollout`'s output (trajectory i belongs to row i // n)."""
    for index, trajectory in enumerate(trajectories):
        score_trajectory(trajectory, rows[index // n])


def _mean(values: Sequence[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Reward, tool and length metrics of one batch (keys shared with the UI)."""
    rewards = [t.total_reward for t in trajectories]
    calls = sum(t.metrics.get("tool_calls", 0.0) for t in trajectories)
    errors = sum(t.metrics.get("tool_errors", 0.0) for t in trajectories)
    malformed = sum(t.metrics.get("malformed_calls", 0.0) for t in trajectories)
    return {
        "reward/mean": _mean(rewards),
        "reward/std": float(statistics.pstdev(rewards)) if len(rewards) > 1 else 0.0,
        "reward/max": max(rewards, default=0.0),
        "reward/min": min(rewards, default=0.0),
        # verl's name for the same number (it reports no reward/mean), so torch and verl runs of a
        # task overlay on one curve.
        "critic/score/mean": _mean(rewards),
        "tools/calls_per_traj": calls / max(len(trajectories), 1),
        "tools/error_rate": errors / calls if calls else 0.0,
        "tools/malformed_rate": malformed / calls if calls else 0.0,
        "response_length/mean": _mean([sum(len(s.response_ids) for s in t.steps) for t in trajectories]),
        "num_turns/mean": _mean([float(len(t.steps)) for t in trajectories]),
        "rollout/empty_trajectories": float(sum(not t.steps for t in trajectories)),
    }


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
    return {f"val/{task}/acc": _mean(values) for task, values in sorted(by_task.items())}
