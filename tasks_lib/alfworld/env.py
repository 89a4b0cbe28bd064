"""AlfworldEnv: a ToolEnv whose one tool, env_step, plays the row's ALFWorld game."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasks_lib.alfworld import prompts
from tasks_lib.alfworld.data import resolve_game
from tasks_lib.alfworld.engine import AlfredGame
from tasks_lib.alfworld.reward import success_reward
from tasks_lib.alfworld.tools import EnvStepTool
from trainer.envs import ENVS, ToolEnv
from trainer.mdp import Action, Observation
from trainer.tools import BaseTool


@ENVS.register("alfworld")
class AlfworldEnv(ToolEnv):
    """Reset opens the game named by the row's ``extra_info.gamefile`` and shows its opening text with the
    admissible commands. Each step runs at most one command (the game is sequential); the step that
    wins the game ends the episode with reward 1, a reply without a command ends it with reward 0.
    """

    def __init__(
        self,
        tools: Sequence[str | BaseTool] = ("env_step",),
        tool_format: str = "hermes",
        tools_kwargs: Mapping[str, Any] | None = None,
        max_tool_calls_per_step: int = 1,
        tool_timeout_s: float = 30.0,
    ) -> None:
        names = [tool if isinstance(tool, str) else tool.name for tool in tools]
        if any(name != "env_step" for name in names):
            raise ValueError(f"the alfworld env offers only the env_step tool, not {names}")
        self.step_tool = EnvStepTool()
        super().__init__(
            tools=[self.step_tool],
            tool_format=tool_format,
            tools_kwargs=tools_kwargs,
            max_tool_calls_per_step=max_tool_calls_per_step,
            tool_timeout_s=tool_timeout_s,
        )
        self.game: AlfredGame | None = None

    def reset(self, **row: Any) -> Observation:
        super().reset(**row)
        gamefile = (row.get("extra_info") or {}).get("gamefile")
        if not gamefile:
            raise ValueError("an alfworld row needs extra_info.gamefile (the game.tw-pddl to play)")
        self.close()
        self.game = AlfredGame(resolve_game(str(gamefile)))
        self.step_tool.game = self.game
        opening = prompts.observation(self.game.reset(), self.game.admissible)
        last = self.messages[-1]
        self.messages[-1] = {**last, "content": f"{last['content']}\n\n{opening}"}
        return self.observation()

    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        if self.game is None:
            raise RuntimeError("step() before reset()")
        observation, _, done, info = await super().step(action)
        won = self.game.won
        info["won"] = won
        info["invalid_commands"] = sum(
            record.info.get("error") == "not_admissible" for record in info.get("tool_calls", [])
        )
        return observation, success_reward(won), done or won, info

    def close(self) -> None:
        if self.game is not None:
            self.game.close()
            self.game = None
            self.step_tool.game = None
