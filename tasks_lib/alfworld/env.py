"""AlfworldEnv: a ToolEnv whose one tool, env_step, plays the row's ALFWorld game."""

from __future__ import annotations

from typing import Any

from tasks_lib.alfworld import prompts
from tasks_lib.alfworld.data import resolve_game
from tasks_lib.alfworld.engine import AlfredGame
from tasks_lib.alfworld.reward import success_reward
from tasks_lib.alfworld.tools import EnvStepTool
from tasks_lib.game_env import GameEnv
from trainer.envs import ENVS
from trainer.mdp import Action, Observation


@ENVS.register("alfworld")
class AlfworldEnv(GameEnv[AlfredGame]):
    """Reset opens the game named by the row's ``extra_info.gamefile`` and shows its opening text with the
    admissible commands. Each step runs at most one command (the game is sequential); the step that
    wins the game ends the episode with reward 1, a reply without a command ends it with reward 0.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__(EnvStepTool(), **settings)
        self.game: AlfredGame | None = None

    def reset(self, **row: Any) -> Observation:
        super().reset(**row)
        gamefile = (row.get("extra_info") or {}).get("gamefile")
        if not gamefile:
            raise ValueError("an alfworld row needs extra_info.gamefile (the game.tw-pddl to play)")
        self.close()
        self.game = AlfredGame(resolve_game(str(gamefile)))
        return self.open_game(self.game, prompts.observation(self.game.reset(), self.game.admissible))

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
            self.game_tool.game = None
