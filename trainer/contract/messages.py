"""The chat-messages contract: demonstrations for the SFT stage (docs/sft.md#demonstrations).

A demonstrations dataset is a parquet file with a ``messages`` column, verl's multi-turn SFT layout:
each row is one conversation, a list of ``{"role", "content"}`` with roles system, user, assistant and
tool. An assistant's tool calls are written in its content in the hermes format the flows parse
(``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, trainer.tools.formats), each call's
result is a ``tool`` message after it, and the last message is the assistant's final answer in the
task's answer format. An optional ``tools`` column holds the tool schemas offered in that
conversation (a list of JSON-schema objects, or that list JSON-encoded), as verl's ``tools_key``.

The demonstrations generator writes these rows, the upload validator and the SFT trainer read them
through :func:`conversation_problems`, so what one side writes the other accepts.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

__all__ = [
    "MESSAGES_KEY",
    "MESSAGE_ROLES",
    "TOOLS_KEY",
    "conversation_problems",
    "is_messages_layout",
    "tool_schemas_of",
]

MESSAGES_KEY = "messages"  # verl's data.multiturn.messages_key default
TOOLS_KEY = "tools"  # verl's data.multiturn.tools_key default
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
_RL_PROMPT_KEY = "prompt"  # a file with a prompt column is an RL dataset (docs/contract.md#the-data-contract)


def is_messages_layout(column_names: Collection[str]) -> bool:
    """Whether a file with these columns is a demonstrations dataset rather than RL rows."""
    return MESSAGES_KEY in column_names and _RL_PROMPT_KEY not in column_names


def conversation_problems(messages: Any) -> list[str]:
    """What is wrong with one row's ``messages`` ([] when it can be trained on): a list of role/content
    mappings with known roles, at least one assistant turn, a tool message only after an assistant
    turn, and the last message the assistant's."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return [f"must be a list of {{role, content}} messages, not {type(messages).__name__}"]
    if not messages:
        return ["holds no messages"]
    problems: list[str] = []
    for index, message in enumerate(messages):
        problems += _message_problems(index, message)
    if problems:
        return problems
    roles = [message["role"] for message in messages]
    if "assistant" not in roles:
        return ["holds no assistant message: there is nothing to learn"]
    if roles[-1] != "assistant":
        problems.append(f"ends with a {roles[-1]} message: the last message must be the assistant's answer")
    for index, role in enumerate(roles):
        if role == "tool" and (index == 0 or roles[index - 1] not in ("assistant", "tool")):
            problems.append(f"message {index} is a tool result that follows no assistant tool call")
    return problems


def _message_problems(index: int, message: Any) -> list[str]:
    if not isinstance(message, dict):
        return [f"message {index} must be a {{role, content}} mapping, not {type(message).__name__}"]
    problems = []
    role = message.get("role")
    if role not in MESSAGE_ROLES:
        problems.append(f"message {index} has role {role!r}: use one of {', '.join(MESSAGE_ROLES)}")
    if not isinstance(message.get("content"), str):
        problems.append(f"message {index} has no text content (content must be a string)")
    return problems


def tool_schemas_of(value: Any) -> list[dict[str, Any]]:
    """A row's ``tools`` cell as a list of schemas: none, a list, or that list JSON-encoded."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(schema, dict) for schema in value):
        raise ValueError("tools must be a list of JSON-schema objects (or that list as a JSON string)")
    return value
