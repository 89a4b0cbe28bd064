"""The web_action tool: one WebShop action (search[...] or click[...]) in the episode's shop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tasks_lib.webshop import prompts
from trainer.tools import TOOLS, BaseTool, ToolResult

if TYPE_CHECKING:
    from tasks_lib.webshop.env import Shop


@TOOLS.register("web_action")
class WebActionTool(BaseTool):
    """Bound to one shop session by WebShopEnv."""

    name = "web_action"
    description = "Act on the shopping website: search[query] on the search page, or click[button]."
    parameters = {
        "type": "object",
        "properties": {"action": {"type": "string", "description": "search[...] or click[...]"}},
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, shop: Shop | None = None, **tool_kwargs: Any) -> None:
        super().__init__(**tool_kwargs)
        self.shop = shop

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        if self.shop is None:
            raise RuntimeError("web_action needs the WebShop env: set env_kwargs.env_type to 'webshop'")
        result = self.shop.step(str(args["action"]))
        info: dict[str, Any] = {"valid": result.valid, "done": result.done, "score": result.score}
        if not result.valid:
            info["error"] = "invalid_action"
        return ToolResult(
            text=prompts.observation(result.observation, self.shop.available_actions()), info=info
        )
