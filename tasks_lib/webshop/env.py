"""WebShopEnv: a ToolEnv whose one tool, web_action, drives a shop session for the row's goal."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks_lib.bm25 import Bm25Index
from tasks_lib.common import resolve_path
from tasks_lib.game_env import GameEnv
from tasks_lib.webshop import prompts
from tasks_lib.webshop.adapter import OriginalWebShop
from tasks_lib.webshop.catalog import DEFAULT_CATALOG_SIZE, Goal, Product, read_products, synthetic_catalog
from tasks_lib.webshop.data import FIXTURES
from tasks_lib.webshop.reward import SUCCESS_THRESHOLD
from tasks_lib.webshop.simulator import WebShopSim
from tasks_lib.webshop.tools import Shop, WebActionTool
from trainer.envs import ENVS
from trainer.mdp import Action, Observation


@lru_cache(maxsize=4)
def _synthetic_parts(size: int, seed: int) -> tuple[tuple[Product, ...], Bm25Index]:
    products = synthetic_catalog(size, seed)
    return products, Bm25Index.build([product.search_text() for product in products])


@lru_cache(maxsize=4)
def _file_parts(path: str) -> tuple[tuple[Product, ...], Bm25Index]:
    products = tuple(read_products(Path(path)))
    return products, Bm25Index.build([product.search_text() for product in products])


@ENVS.register("webshop")
class WebShopEnv(GameEnv[Shop]):
    """Reset starts a session for the row's goal (``reward_model.ground_truth``) and shows the search page.

    Reward: on purchase, 1 for success (score >= 0.999) or the score itself with ``reward_mode="score"``;
    every invalid or malformed call costs ``invalid_penalty``; a reply without an action ends the episode
    having bought nothing. Steps log ``webshop_score`` and ``success``.
    """

    def __init__(
        self,
        shop: str = "simulator",
        catalog_seed: int = 0,
        catalog_size: int = DEFAULT_CATALOG_SIZE,
        catalog_path: str | None = None,
        reward_mode: str = "success",
        invalid_penalty: float = 0.02,
        original_kwargs: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        if shop not in ("simulator", "original"):
            raise ValueError(f"shop must be 'simulator' or 'original', got {shop!r}")
        if reward_mode not in ("success", "score"):
            raise ValueError(f"reward_mode must be 'success' or 'score', got {reward_mode!r}")
        super().__init__(WebActionTool(), **settings)
        self.shop_kind = shop
        self.catalog = (catalog_path, catalog_size, catalog_seed)
        self.reward_mode = reward_mode
        self.invalid_penalty = invalid_penalty
        self.original_kwargs = dict(original_kwargs or {})

    def _open_shop(self, row: Mapping[str, Any]) -> tuple[Shop, str]:
        if self.shop_kind == "original":
            original = OriginalWebShop(**self.original_kwargs)
            return original, original.reset((row.get("extra_info") or {}).get("session", 0))
        path, size, seed = self.catalog
        products, index = (
            _file_parts(str(resolve_path(path, FIXTURES))) if path else _synthetic_parts(size, seed)
        )
        truth = (row.get("reward_model") or {}).get("ground_truth")
        if not isinstance(truth, Mapping):
            raise ValueError("a webshop row needs its goal as reward_model.ground_truth")
        simulator = WebShopSim(products, index)
        return simulator, simulator.reset(Goal.from_json(truth))

    def reset(self, **row: Any) -> Observation:
        super().reset(**row)
        shop, page = self._open_shop(row)
        return self.open_game(shop, prompts.observation(page, shop.available_actions()))

    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        observation, _, done, info = await super().step(action)
        calls = info.get("tool_calls", [])
        invalid = sum(call.error is not None or call.info.get("error") is not None for call in calls)
        purchase = next((call.info for call in calls if call.info.get("done")), None)
        reward = 0.0 - self.invalid_penalty * invalid
        score = 0.0
        if purchase is not None:
            score = float(purchase.get("score") or 0.0)
            reward += score if self.reward_mode == "score" else float(score >= SUCCESS_THRESHOLD)
            done = True
        info.update(invalid_actions=invalid, webshop_score=score, success=score >= SUCCESS_THRESHOLD)
        return observation, reward, done, info
