"""Arithmetic: the first-run demo. Small sums, a calculator tool, reward 1 for the right answer."""

from __future__ import annotations

from tasks_lib.arithmetic import data
from tasks_lib.arithmetic import tools as tools
from tasks_lib.arithmetic.reward import compute_score
from tasks_lib.registry import register_task

RECIPE = register_task(
    data,
    compute_score,
    name="arithmetic",
    description="Small multi-step sums with a calculator tool; the demo a new user's first run uses "
    "(GRPO on SmolLM2-135M shows a rising reward on a laptop CPU).",
    tools=("calculator",),
    max_steps=3,
    # Short replies and a little less randomness than 1.0: what SmolLM2-135M on a CPU learns from;
    # 30 steps show the curve rise (the model's own settings come from its size, docs/presets.md).
    run_overrides={
        "rollout.max_new_tokens": 48,
        "rollout.temperature": 0.8,
        "trainer.total_steps": 30,
        "trainer.val_every": 10,
    },
    input_help="optional JSON Lines of {question, answer}; without --input the problems are generated",
    needs_input=False,
    generates=True,
    levels=data.LEVELS,
    demonstrate=data.demonstrate,
)
