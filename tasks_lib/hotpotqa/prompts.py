"""HotpotQA prompts: search for the facts, then answer inside <answer> tags."""

from __future__ import annotations

SYSTEM_PROMPT = (
    "Answer the question. Use the search tool to look up facts; the answer may need two searches. "
    "For example:\n"
    '<tool_call>{"name": "search", "arguments": {"query": "Kesh port city"}}</tool_call>\n'
    "When you know the answer, reply with it inside answer tags, e.g. <answer>Kesh</answer>."
)


def messages(question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Question: {question.strip()}"},
    ]
