"""WebShop score: how well a purchase matches the goal, from attribute, option, price and type match.

score = r_type * (matched attributes + matched options + r_price) / (goal attributes + goal options + 1)

r_type is 1 for the goal's product type, 0.5 for another type in the same department, 0.1 otherwise;
r_price is 1 when the price is at most the goal's limit. Success is score >= 0.999 (docs/tasks.md#webshop).
The idea follows the WebShop paper; the code and weights here are our own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasks_lib.webshop.catalog import Goal, Product

SUCCESS_THRESHOLD = 0.999


@dataclass(frozen=True)
class Score:
    score: float

    @property
    def success(self) -> bool:
        return self.score >= SUCCESS_THRESHOLD


def score_purchase(product: Product, selected: Mapping[str, str], goal: Goal) -> Score:
    if product.category == goal.category:
        r_type = 1.0
    elif goal.department and product.department == goal.department:
        r_type = 0.5
    else:
        r_type = 0.1
    matched_attributes = sum(attribute in product.attributes for attribute in goal.attributes)
    matched_options = sum(selected.get(name) == value for name, value in goal.options.items())
    r_price = 1.0 if product.price <= goal.price_upper else 0.0
    total = len(goal.attributes) + len(goal.options) + 1
    score = r_type * (matched_attributes + matched_options + r_price) / total
    return Score(score)


def compute_score(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, Any]:
    """A final reply that reached the reward function bought nothing (WebShopEnv scores purchases itself)."""
    return {"score": 0.0, "acc": 0.0, "webshop_score": 0.0}
