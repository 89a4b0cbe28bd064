"""Environments (Agent-R1's AgentEnv layer, docs/algorithms.md#agentenv).

An env is created per trajectory, ``reset`` with the dataset row, then stepped with each LLM
response. ``step`` returns (observation, reward, done, info); reward None means "score this step
with the reward function" (the final answer), a number is the env's own reward for the step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from trainer.contract.wire import json_object
from trainer.mdp import Action, Message, Observation
from trainer.registry import Registry


class AgentEnv(ABC):
    """Base class; register subclasses with ``@ENVS.register("env_type")``."""

    def __init__(self, **env_kwargs: Any) -> None:
        self.env_kwargs = env_kwargs

    @abstractmethod
    def reset(self, **row: Any) -> Observation:
        """Start an episode for one dataset row and return the first observation."""

    @abstractmethod
    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        """Apply one LLM response; return (next observation, reward or None, done, info)."""

    def close(self) -> None:  # noqa: B027  (an optional hook: most envs hold nothing)
        """Release what the episode held (processes, files); flows call it when the episode ends."""


ENVS: Registry[type[AgentEnv]] = Registry("env type")


def prompt_messages(row: Mapping[str, Any]) -> list[Message]:
    """The row's ``prompt`` as a fresh list of message dicts.

    Parquet readers hand back arrays of mappings rather than lists of dicts, so both are accepted;
    a plain string is not a chat and is rejected.
    """
    prompt = row.get("prompt", row.get("raw_prompt"))
    if prompt is None:
        raise ValueError("row has no 'prompt': expected a list of {role, content} messages")
    if isinstance(prompt, str | bytes) or not hasattr(prompt, "__iter__"):
        raise ValueError(
            f"row 'prompt' must be a list of {{role, content}} messages, not {type(prompt).__name__}"
        )
    messages = [dict(message) for message in prompt]
    for index, message in enumerate(messages):
        if not isinstance(message.get("role"), str) or "content" not in message:
            raise ValueError(f"row 'prompt' message {index} needs a string 'role' and a 'content'")
    return messages


def parse_env_kwargs(value: Any) -> dict[str, Any]:
    """A row's ``env_kwargs`` column (JSON string, mapping or empty) as a dict.

    None values are dropped: a parquet struct column gives every row every key, None where the row
    had none, and those must not override the run's defaults.
    """
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        value = json_object(value, "row 'env_kwargs'")
    if not isinstance(value, Mapping):
        raise ValueError(f"row 'env_kwargs' must be a JSON object, not {type(value).__name__}")
    return {key: item for key, item in value.items() if item is not None}
