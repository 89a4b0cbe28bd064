"""The web_action tool: one WebShop action (search[...] or click[...]) in the episode's shop."""

from __future__ import annotations

from typing import Any, Protocol

from tasks_lib.game_env import GameTool
from tasks_lib.webshop import prompts
from tasks_lib.webshop.simulator import ShopStep
from trainer.tools import ToolResult, one_string_parameter, register_tool


class Shop(Protocol):
    """What the tool acts on: our simulator or the original WebShop."""

    def step(self, action: str) -> ShopStep: ...

    def available_actions(self) -> list[str]: ...


@register_tool
class WebActionTool(GameTool[Shop]):
    """Bound to one shop session (the episode's game) by WebShopEnv."""

    name = "web_action"
    env_type = "webshop"
    description = "Act on the shopping website: search[query] on the search page, or click[button]."
    parameters = one_string_parameter("action", "search[...] or click[...]")

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        shop = self.bound_game()
        result = shop.step(str(args["action"]))
        info: dict[str, Any] = {"valid": result.valid, "done": result.done, "score": result.score}
        if not result.valid:
            info["error"] = "invalid_action"
        return ToolResult(text=prompts.observation(result.observation, shop.available_actions()), info=info)
