"""WebShop: a clean-room shopping simulator with WebShop's search[...]/click[...] grammar."""

from __future__ import annotations

from tasks_lib.registry import register_task
from tasks_lib.webshop import data
from tasks_lib.webshop import env as env
from tasks_lib.webshop import tools as tools
from tasks_lib.webshop.reward import compute_score

RECIPE = register_task(
    data,
    compute_score,
    name="webshop",
    description="Shop for a product matching an instruction: search, open a result, pick options, "
    "buy. Score from type, attribute, option and price match; reward 1 on success (score >= 0.999).",
    env_type="webshop",
    tools=("web_action",),
    max_steps=15,
    input_help="a folder with products.jsonl and goals.jsonl in our catalog schema; without --input a "
    "synthetic catalog is generated",
    needs_input=False,
    generates=True,
)
