"""Helpers for the task recipe tests: an episode runner, policies, and a policy-driven LLM.

Episodes run through the real environments (ToolEnv, AlfworldEnv, WebShopEnv) and the real reward
functions; the only thing stood in for is the LLM, at the one seam the trainer has for it.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from trainer.envs import ENVS, AgentEnv, parse_env_kwargs
from trainer.llm import Generation, SamplingParams
from trainer.mdp import Action, Observation
from trainer.rewards import score_step

Row = dict[str, Any]
Policy = Callable[[Observation], str]


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


MALFORMED_REPLIES = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>',
    "<tool_call>this is not json</tool_call>",
    '<tool_call>{"arguments": {"query": "x"}}</tool_call>',
    '<tool_call>{"name": "no_such_tool", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": 12}}</tool_call>',
    '<tool_call>{"name": "search", "arguments": "not an object"}</tool_call>',
    '<tool_call>{"name": "env_step", "arguments": {"command": ["go", "north"]}}</tool_call>',
    '<tool_call>{"name": "web_action", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "web_action", "arguments": {"action": "search[',
]


@dataclass
class Episode:
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def total(self) -> float:
        return sum(self.rewards)


def make_env(row: Row) -> AgentEnv:
    """The env a flow would make for this row (AgentFlowBase.make_env without run defaults)."""
    settings = parse_env_kwargs(row.get("env_kwargs"))
    return ENVS.get(settings.pop("env_type", "tool"))(**settings)


def play(row: Row, policy: Policy, *, max_steps: int = 20) -> Episode:
    """Run one episode like AgentEnvLoop does; unscored steps go to the row's reward function."""
    env = make_env(row)
    episode = Episode()
    try:
        observation = env.reset(**row)
        for _ in range(max_steps):
            reply = policy(observation)
            observation, reward, done, info = asyncio.run(env.step(Action(text=reply)))
            if reward is None:
                truth = row["reward_model"]["ground_truth"]
                reward, _ = score_step(row["data_source"], reply, truth, row["extra_info"])
            episode.rewards.append(reward)
            episode.infos.append(info)
            episode.replies.append(reply)
            if done:
                episode.done = True
                break
    finally:
        env.close()
    return episode


def last_text(observation: Observation) -> str:
    return str(observation.messages[-1]["content"])


def scripted(replies: list[str]) -> Policy:
    """Replies in order, whatever the observation."""
    queue = iter(replies)

    def policy(observation: Observation) -> str:
        return next(queue)

    return policy


def malformed_policy(final_answer: str = "I give up.") -> Policy:
    replies = iter(MALFORMED_REPLIES)

    def policy(observation: Observation) -> str:
        return next(replies, final_answer)

    return policy


def random_text_policy(seed: int, tool: str, argument: str, *, calls: int = 3) -> Policy:
    """Random words, sometimes sent through the task's tool, then a random final reply."""
    rng = random.Random(seed)
    words = ["apple", "seven", "north", "red", "42", "the", "lamp", "x", "buy", "?", "click", "search"]
    state = {"calls": 0}

    def policy(observation: Observation) -> str:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
        if state["calls"] < calls:
            state["calls"] += 1
            return tool_call(tool, **{argument: text})
        return text

    return policy


def read_rows(path: Path) -> list[Row]:
    rows: list[Row] = pq.read_table(path).to_pylist()
    return rows


class PolicyLLM:
    """An LLMClient whose replies come from a policy reading the decoded prompt (the one faked seam)."""

    def __init__(self, tokenizer: Any, policy: Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        ids = [
            *self.tokenizer.encode(self.policy(prompt), add_special_tokens=False),
            self.tokenizer.eos_token_id,
        ]
        return Generation(token_ids=ids, log_probs=[-1.0] * len(ids))
