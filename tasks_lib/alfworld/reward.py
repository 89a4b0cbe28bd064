"""ALFWorld reward: success (the engine's ``won``) = 1, else 0 (docs/tasks.md#alfworld).

The engine decides success, so AlfworldEnv scores every step itself: 1.0 on the step that wins the
game, 0.0 on every other step, including a final reply without a command. :func:`compute_score` is
what the trainer would use if a row's final answer reached the reward function without the engine
(for instance when run with the plain "tool" env): a text reply cannot complete a household task, so
it earns nothing.
"""

from __future__ import annotations

from typing import Any


def success_reward(won: bool) -> float:
    return 1.0 if won else 0.0


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    return {"score": success_reward(False), "acc": 0.0}
