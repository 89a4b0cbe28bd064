"""Recipes reach the trainer through the entry-point group; the trainer itself never imports tasks_lib."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

from tasks_lib import TASKS, load_recipes

RECIPES = {"arithmetic", "gsm8k", "hotpotqa", "alfworld", "webshop"}


def test_every_recipe_is_declared_in_the_entry_point_group() -> None:
    declared = {ep.name: ep.value for ep in entry_points(group="agent_r1_studio.tasks")}
    assert {name: f"tasks_lib.{name}" for name in RECIPES}.items() <= declared.items()


def test_every_recipe_is_registered_with_the_same_shape() -> None:
    load_recipes()
    assert set(TASKS) >= RECIPES
    for name in RECIPES:
        recipe = TASKS.get(name)
        assert recipe.name == name and recipe.data_source == name
        assert recipe.fixtures.is_dir() and any(recipe.fixtures.iterdir())
        folder = recipe.fixtures.parent
        assert {"data.py", "reward.py", "prompts.py"} <= {p.name for p in folder.iterdir()}
        assert (folder / "tools.py").is_file() or (folder / "env.py").is_file()
        assert recipe.run_defaults()["rollout.tools"] == list(recipe.tools)


def test_the_trainer_loads_the_recipes_by_entry_point_without_importing_tasks_lib_itself() -> None:
    script = """
import json, sys
import trainer.flows, trainer.envs, trainer.tools, trainer.rewards, trainer.config
before = sorted(m for m in sys.modules if m.startswith("tasks_lib"))
from trainer.plugins import load_plugins
loaded = load_plugins()
from trainer.envs import ENVS
from trainer.rewards import REWARDS
from trainer.tools import TOOLS
print(json.dumps({"before": before, "loaded": loaded, "tools": TOOLS.names(), "envs": ENVS.names(),
                  "rewards": REWARDS.names()}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["before"] == []
    assert set(seen["loaded"]) >= RECIPES
    assert {"calculator", "search", "env_step", "web_action"} <= set(seen["tools"])
    assert {"alfworld", "webshop", "tool"} <= set(seen["envs"])
    assert set(seen["rewards"]) >= RECIPES
