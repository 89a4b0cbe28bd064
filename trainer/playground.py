"""The playground: one prompt through the agent loop of a model or a checkpoint, step by step, inside
a time and a token budget (docs/playground.md).

A flow runs the row as a training rollout would (the run's tools, tool format, context policy), with
greedy decoding, and hands every step to ``on_step`` as soon as the env has answered it, so the
caller can store it for the page to show while the next step generates. What stops the episode is
recorded as its stop reason: the env said done, the step limit, the token budget
("response_budget"), the time budget ("time_budget") or a prompt too long for the run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.llm import Generation, LLMClient, SamplingParams
from trainer.mdp import Step, Trajectory
from trainer.rollout import make_flow, score_trajectory

if TYPE_CHECKING:
    from trainer.config import RunConfig

TIME_BUDGET = "time_budget"  # the stop reason of an episode cut off by its time budget


@dataclass(frozen=True)
class Budget:
    """What one playground answer may spend: LLM calls, model tokens (per call and in all), seconds."""

    max_steps: int = 5
    max_new_tokens: int = 256
    max_total_tokens: int = 1024
    time_s: float = 120.0


@dataclass
class PlayResult:
    steps: list[dict[str, Any]]
    stop_reason: str
    reward: float | None = None
    response_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


class TimeBudgetSpent(Exception):
    """The answer's time budget ran out before its next LLM call."""


class TimedClient:
    """An LLM client that refuses a call once ``deadline`` (time.monotonic) has passed."""

    def __init__(self, inner: LLMClient, deadline: float) -> None:
        self.inner = inner
        self.deadline = deadline

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if time.monotonic() >= self.deadline:
            raise TimeBudgetSpent
        return await self.inner.generate(prompt_ids, sampling)


def step_view(index: int, step: Step) -> dict[str, Any]:
    """What the page shows of one step: the model's text, each tool call with its result, the reward."""
    return {
        "index": index,
        "response": step.response_text,
        "tokens": len(step.response_ids),
        "finish_reason": step.info.get("finish_reason", ""),
        "tool_calls": [
            {
                "name": call.name,
                "arguments": call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
                "result": call.result,
                "error": call.error,
            }
            for call in step.tool_calls
        ],
        "reward": step.reward,
    }


def budgeted_config(config: RunConfig, budget: Budget) -> RunConfig:
    """``config`` with the budget's step limit and token budget in place of the run's."""
    rollout = config.rollout.model_copy(update={"max_steps": budget.max_steps})
    data = config.data.model_copy(update={"max_response_length": budget.max_total_tokens})
    return config.model_copy(update={"rollout": rollout, "data": data})


def play(
    row: Mapping[str, Any],
    *,
    llm: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    budget: Budget,
    on_step: Callable[[dict[str, Any]], None],
) -> PlayResult:
    """Run ``row`` through its flow within ``budget``; score it when the row has a ground truth."""
    steps: list[Step] = []

    def observe(step: Step) -> None:
        steps.append(step)
        on_step(step_view(len(steps) - 1, step))

    flow = make_flow(
        row, TimedClient(llm, time.monotonic() + budget.time_s), tokenizer, budgeted_config(config, budget)
    )
    flow.on_step = observe
    sampling = SamplingParams(greedy=True, max_new_tokens=budget.max_new_tokens)
    try:
        output = asyncio.run(flow.run(sampling, **row))
        stop_reason = str(output.info.get("stop_reason", ""))
    except TimeBudgetSpent:
        output, stop_reason = flow.finish(steps, TIME_BUDGET), TIME_BUDGET
    reward = _score(row, output.steps) if _ground_truth(row) is not None else None
    return PlayResult(
        steps=[step_view(i, step) for i, step in enumerate(output.steps)],
        stop_reason=stop_reason,
        reward=reward,
        response_tokens=sum(len(step.response_ids) for step in output.steps),
        metrics=dict(output.metrics),
    )


def _ground_truth(row: Mapping[str, Any]) -> Any:
    return (row.get("reward_model") or {}).get("ground_truth")


def _score(row: Mapping[str, Any], steps: list[Step]) -> float:
    """R(τ) of the episode under the row's reward (its data_source's, as in training)."""
    trajectory = Trajectory(
        id="playground",
        group_id="playground",
        sample_index=0,
        rollout_index=0,
        data_source=str(row.get("data_source") or ""),
        steps=steps,
        ground_truth=_ground_truth(row),
    )
    score_trajectory(trajectory, row)
    return trajectory.total_reward


def load_engine(weights: Path, tokenizer_path: Path, config: RunConfig) -> tuple[LLMClient, Any]:
    """A generation engine over ``weights`` (a model folder or a checkpoint's policy/, LoRA merged)
    and the tokenizer of the model the run started from."""
    from trainer.backends.torch.engine import TorchGenerationEngine
    from trainer.backends.torch.loop import DTYPES, resolve_device, thread_budget
    from trainer.models import load_policy, load_tokenizer
    from trainer.rollout import stop_token_ids

    device = resolve_device(config.trainer.device)
    trust = config.model.trust_remote_code
    tokenizer = load_tokenizer(tokenizer_path, trust_remote_code=trust)
    policy = load_policy(weights, dtype=DTYPES[config.model.dtype], trust_remote_code=trust)
    policy = policy.to(device).eval().requires_grad_(False)
    engine = TorchGenerationEngine(
        policy,
        stop_token_ids=stop_token_ids(tokenizer, policy.generation_config),
        pad_token_id=int(tokenizer.pad_token_id),
        device=device,
        seed=config.trainer.seed,
        threads=thread_budget(config),
    )
    return engine, tokenizer
