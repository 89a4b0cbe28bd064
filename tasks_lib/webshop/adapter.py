"""An optional adapter to the original WebShop, for users who install it themselves.

The original (princeton-nlp/WebShop, Python package ``web_agent_site``) is licensed for non-commercial
use only and needs its own product files, so nothing of it ships with Agent-R1 Studio. With it
installed, set the row's ``env_kwargs`` to ``{"env_type": "webshop", "shop": "original"}`` and
``extra_info.session`` to the goal index; this class then drives its ``WebAgentTextEnv`` in text
mode behind the same interface as :class:`~tasks_lib.webshop.simulator.WebShopSim`.
"""

from __future__ import annotations

from typing import Any

from tasks_lib.webshop.simulator import ShopStep, parse_action

INSTALL_HINT = (
    "the original WebShop is not installed: clone princeton-nlp/WebShop, run its setup (data files "
    "included) and install it into this environment; its licence is non-commercial"
)


class OriginalWebShop:
    """``reset(session)`` / ``step(action)`` / ``available_actions()`` over the original WebAgentTextEnv."""

    def __init__(self, **env_kwargs: Any) -> None:
        try:
            from web_agent_site.envs import WebAgentTextEnv
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        self.env = WebAgentTextEnv(observation_mode="text", **env_kwargs)

    def reset(self, session: int | str) -> str:
        result = self.env.reset(session=session)
        observation = result[0] if isinstance(result, tuple) else result
        return str(observation)

    def available_actions(self) -> list[str]:
        offered = self.env.get_available_actions()
        actions = ["search[<query>]"] if offered.get("has_search_bar") else []
        return actions + [f"click[{target}]" for target in offered.get("clickables", [])]

    def _is_offered(self, action: str) -> bool:
        parsed = parse_action(action)
        if parsed is None:
            return False
        offered = self.env.get_available_actions()
        if parsed[0] == "search":
            return bool(offered.get("has_search_bar")) and bool(parsed[1])
        return parsed[1].lower() in [str(c).lower() for c in offered.get("clickables", [])]

    def step(self, action: str) -> ShopStep:
        if not self._is_offered(action):
            return ShopStep(
                f"Invalid action: {action!r}. Available: {', '.join(self.available_actions())}", valid=False
            )
        observation, reward, done, _ = self.env.step(action)[:4]
        return ShopStep(str(observation), done=bool(done), score=float(reward) if done else None)
