"""Lookup prompts: short, with the exact tool-call format spelled out for a small model."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "Values are stored in a table you can only read with the lookup tool. To call it, write exactly:\n"
    '<tool_call>{"name": "lookup", "arguments": {"key": "amber-001"}}</tool_call>\n'
    "Then give the value as: Answer: 123456"
)


def question(key: str) -> str:
    return f"What is the value stored under the key {key}?"


def messages(key: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question(key)}]
