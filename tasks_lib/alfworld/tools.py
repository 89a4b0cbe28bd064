"""The env_step tool: send one admissible command to the episode's ALFWorld game."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tasks_lib.alfworld import prompts
from trainer.tools import TOOLS, BaseTool, ToolResult

if TYPE_CHECKING:
    from tasks_lib.alfworld.engine import AlfredGame


@TOOLS.register("env_step")
class EnvStepTool(BaseTool):
    """Bound to one game by AlfworldEnv; the command must be one of the game's admissible commands."""

    name = "env_step"
    description = (
        "Perform one action in the household, e.g. 'go to fridge 1' or 'take apple 1 from countertop 1'."
    )
    parameters = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "One of the admissible commands."}},
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(self, game: AlfredGame | None = None, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        self.game = game

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        if self.game is None:
            raise RuntimeError("env_step needs the ALFWorld env: set env_kwargs.env_type to 'alfworld'")
        command = " ".join(str(args["command"]).split()).lower()
        if command not in self.game.admissible:
            text = prompts.observation(
                f"Error: {args['command']!r} is not an admissible command. Nothing happens.",
                self.game.admissible,
            )
            return ToolResult(text=text, info={"error": "not_admissible"})
        feedback = self.game.step(command)
        return ToolResult(
            text=prompts.observation(feedback, self.game.admissible), info={"won": self.game.won}
        )
