"""Lookup: the answers exist only behind a tool, a key → value service the recipe runs on loopback."""

from __future__ import annotations

from tasks_lib.lookup import data
from tasks_lib.lookup import tools as tools
from tasks_lib.lookup.reward import compute_score
from tasks_lib.registry import register_task

RECIPE = register_task(
    data,
    compute_score,
    name="lookup",
    description="Questions about the value stored under a key, in a table that only the lookup tool "
    "reads (a small HTTP service the recipe runs on loopback): without the tool the reward is about 0.",
    tools=("lookup",),
    max_steps=3,
    run_overrides={"rollout.max_new_tokens": 48, "rollout.temperature": 0.8},
    input_help="optional JSON Lines of {key}; without --input the keys are drawn from the table of --seed",
    needs_input=False,
    generates=True,
    demonstrate=data.demonstrate,
)
