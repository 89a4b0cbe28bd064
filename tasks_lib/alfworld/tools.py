"""The env_step tool: send one admissible command to the episode's ALFWorld game."""

from __future__ import annotations

from typing import Any

from tasks_lib.alfworld import prompts
from tasks_lib.alfworld.engine import AlfredGame
from tasks_lib.game_env import GameTool
from trainer.tools import ToolResult, one_string_parameter, register_tool


@register_tool
class EnvStepTool(GameTool[AlfredGame]):
    """Bound to one game by AlfworldEnv; the command must be one of the game's admissible commands."""

    name = "env_step"
    env_type = "alfworld"
    description = (
        "Perform one action in the household, e.g. 'go to fridge 1' or 'take apple 1 from countertop 1'."
    )
    parameters = one_string_parameter("command", "One of the admissible commands.")

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        game = self.bound_game()
        command = " ".join(str(args["command"]).split()).lower()
        if command not in game.admissible:
            text = prompts.observation(
                f"Error: {args['command']!r} is not an admissible command. Nothing happens.",
                game.admissible,
            )
            return ToolResult(text=text, info={"error": "not_admissible"})
        feedback = game.step(command)
        return ToolResult(text=prompts.observation(feedback, game.admissible), info={"won": game.won})
