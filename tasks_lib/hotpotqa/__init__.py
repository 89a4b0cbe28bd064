"""HotpotQA: multi-hop questions answered with a BM25 search tool; reward = normalised exact match."""

from __future__ import annotations

from tasks_lib.hotpotqa import data
from tasks_lib.hotpotqa import tools as tools
from tasks_lib.hotpotqa.reward import compute_score
from tasks_lib.registry import register_task

RECIPE = register_task(
    data,
    compute_score,
    name="hotpotqa",
    description="Multi-hop questions; the agent searches a BM25 index of passages and answers in "
    "<answer> tags. Reward 1 on a normalised exact match with the answer or an alias; F1 is logged.",
    tools=("search",),
    max_steps=5,
    # Agent-R1's HotpotQA recipe discounts between steps; the other tasks keep the presets' 1.0.
    run_overrides={"algorithm.gamma": 0.99},
    input_help="HotpotQA hotpot_train_v1.1.json / hotpot_dev_distractor_v1.json, a file or a folder; "
    "--corpus FILE.jsonl|pooled for one shared index",
    needs_input=False,
    demonstrate=data.demonstrate,
)
