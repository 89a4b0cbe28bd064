"""ALFWorld: household tasks in ALFWorld's real text engine (optional GPL install group ``alfworld``)."""

from __future__ import annotations

from tasks_lib.alfworld import data
from tasks_lib.alfworld import env as env
from tasks_lib.alfworld import tools as tools
from tasks_lib.alfworld.reward import compute_score
from tasks_lib.registry import register_task

RECIPE = register_task(
    data,
    compute_score,
    name="alfworld",
    description="Household tasks (six families: pick, look in light, clean, heat, cool, pick two) "
    "played in ALFWorld's TextWorld engine through the env_step tool; reward 1 when the game is won.",
    env_type="alfworld",
    tools=("env_step",),
    max_steps=20,
    input_help="ALFWorld's json_2.1.1 folder (train/valid_seen/valid_unseen) or one split of it",
    needs_input=False,
)
