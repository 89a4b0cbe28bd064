"""GSM8K: grade-school math word problems with a calculator tool; binary reward on the final answer."""

from __future__ import annotations

from tasks_lib.gsm8k import data
from tasks_lib.gsm8k import tools as tools
from tasks_lib.gsm8k.reward import compute_score
from tasks_lib.registry import register_task

RECIPE = register_task(
    data,
    compute_score,
    name="gsm8k",
    description="Grade-school math word problems; the agent may call a calculator and ends with "
    "'#### <number>'. Reward 1 when the final number is right.",
    tools=("calculator",),
    max_steps=5,
    input_help="GSM8K train.jsonl/test.jsonl (or the Hugging Face parquet files), a file or a folder",
    needs_input=False,
    packaged=True,
)
