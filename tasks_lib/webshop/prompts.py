"""WebShop prompts: the shopper's instruction and the web_action tool in WebShop's action grammar."""

from __future__ import annotations

from collections.abc import Sequence

SYSTEM_PROMPT = (
    "You are shopping on a website for the user. Act with the web_action tool, one action per turn, "
    "written as search[your query] on the search page or click[button] for any bracketed button, e.g.\n"
    '<tool_call>{"name": "web_action", "arguments": {"action": "search[red cotton t-shirt]"}}</tool_call>\n'
    "Open a product, click the option values the user asked for, then click[Buy Now]."
)


def observation(page: str, actions: Sequence[str]) -> str:
    if not actions:
        return page.strip()
    return f"{page.strip()}\n\nAvailable actions: {', '.join(actions)}"


def messages(instruction: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Instruction: {instruction}"},
    ]
