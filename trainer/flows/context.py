"""Context policies: which of the env's messages make up the next prompt (docs/algorithms.md#context-policies).

The env keeps the whole history; a policy picks what the model sees at each step. Every policy has
the same signature, ``policy(messages, window) -> messages``, and returns a new list.
Agent-R1's ablation (GSM8K, GRPO) found the sliding window better than append-only.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.mdp import Message
from trainer.registry import Registry

ContextPolicy = Callable[[list[Message], int], list[Message]]

CONTEXT_POLICIES: Registry[ContextPolicy] = Registry("context policy")


@CONTEXT_POLICIES.register("append")
def append_only(messages: list[Message], window: int) -> list[Message]:
    """The whole history; ``window`` is ignored."""
    return list(messages)


@CONTEXT_POLICIES.register("sliding_window")
def sliding_window(messages: list[Message], window: int) -> list[Message]:
    """The leading system message(s), the first user message (the task), and the last ``window`` turns.

    A turn starts at an assistant message and runs up to the next one, so each kept turn keeps its
    tool results with it. Without a user message there is no task to anchor on: nothing is dropped.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    first_user = next((i for i, message in enumerate(messages) if message.get("role") == "user"), None)
    if first_user is None:
        return list(messages)
    head, rest = messages[: first_user + 1], messages[first_user + 1 :]
    turn_starts = [i for i, message in enumerate(rest) if message.get("role") == "assistant"]
    if len(turn_starts) <= window:
        return list(messages)
    return head + rest[turn_starts[-window] :]
