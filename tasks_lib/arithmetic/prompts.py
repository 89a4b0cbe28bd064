"""Arithmetic demo prompts: short, with the exact tool-call format spelled out for a small model."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "You can use a calculator. To call it, write exactly:\n"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>\n'
    "Then give the result as: Answer: 19"
)


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
