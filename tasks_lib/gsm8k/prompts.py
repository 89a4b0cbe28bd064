"""GSM8K prompts: a system message that asks for `#### N` and points at the calculator."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "You are a careful math tutor. Solve the problem step by step. For arithmetic you may call the "
    "calculator tool, for example:\n"
    '<tool_call>{"name": "calculator", "arguments": {"expression": "48 / 2 + 48"}}</tool_call>\n'
    "When you know the answer, reply without a tool call and end with the final number on its own "
    "line as '#### <number>'."
)


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question.strip()}]
