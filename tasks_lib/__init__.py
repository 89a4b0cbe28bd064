"""Task recipes (GSM8K, HotpotQA, ALFWorld, WebShop, arithmetic) and the shared dataset validator."""

from __future__ import annotations

from tasks_lib.registry import TASKS, PrepareOptions, Recipe, load_recipes
from tasks_lib.validate import Problem, validate

__all__ = ["TASKS", "PrepareOptions", "Problem", "Recipe", "load_recipes", "validate"]
