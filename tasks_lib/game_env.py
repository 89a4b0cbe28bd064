"""What the recipes whose env plays one game through one tool share (ALFWorld, WebShop): the tool that
acts on the episode's game, and the env that makes that tool, offers only it and binds it at reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from trainer.envs import ToolEnv
from trainer.mdp import Observation
from trainer.tools import BaseTool

Game = TypeVar("Game")


class GameTool(BaseTool, Generic[Game]):
    """A tool that acts on one episode's game; the env that made it binds ``game`` at reset."""

    env_type = ""  # the env that binds it, named when the tool is called without one

    def __init__(self, game: Game | None = None, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        self.game = game

    def bound_game(self) -> Game:
        if self.game is None:
            raise RuntimeError(
                f"{self.name} needs the {self.env_type} env: set env_kwargs.env_type to {self.env_type!r}"
            )
        return self.game


class GameEnv(ToolEnv, Generic[Game]):
    """A ToolEnv whose only tool is its own :class:`GameTool`: ``tools`` may name no other, and one call
    runs per turn unless ``max_tool_calls_per_step`` says otherwise (the game is sequential). The other
    ``settings`` are ToolEnv's."""

    def __init__(
        self,
        game_tool: GameTool[Game],
        *,
        tools: Sequence[str | BaseTool] = (),
        max_tool_calls_per_step: int = 1,
        **settings: Any,
    ) -> None:
        names = [tool if isinstance(tool, str) else tool.name for tool in tools]
        if any(name != game_tool.name for name in names):
            raise ValueError(
                f"the {game_tool.env_type} env offers only the {game_tool.name} tool, not {names}"
            )
        super().__init__(tools=[game_tool], max_tool_calls_per_step=max_tool_calls_per_step, **settings)
        self.game_tool = game_tool

    def open_game(self, game: Game, opening: str) -> Observation:
        """The first observation: binds the tool to this episode's ``game`` and shows its ``opening`` text
        after the row's prompt (call after ToolEnv's reset)."""
        self.game_tool.game = game
        last = self.messages[-1]
        self.messages[-1] = {**last, "content": f"{last['content']}\n\n{opening}"}
        return self.observation()
