"""ALFWorld prompts: the system message, the task framing, and how observations are shown."""

from __future__ import annotations

from collections.abc import Sequence

SYSTEM_PROMPT = (
    "You are a household robot in a text world. Act by calling the env_step tool with exactly one of "
    "the admissible commands, one command per turn, for example:\n"
    '<tool_call>{"name": "env_step", "arguments": {"command": "go to countertop 1"}}</tool_call>\n'
    "The episode ends when the task is complete."
)

TASK_PROMPT = "Complete the household task below."


def observation(text: str, admissible: Sequence[str]) -> str:
    """What the model sees after reset and after each command: the game's text and the admissible commands."""
    return f"{text.strip()}\n\nAdmissible commands: {', '.join(admissible)}"


def messages() -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK_PROMPT}]
