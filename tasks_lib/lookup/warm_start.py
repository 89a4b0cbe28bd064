"""The tool-learning demo's two stages on the lookup task (docs/sft.md#the-demos-numbers): a short SFT
on demonstrations that teaches the call format, then GRPO from its checkpoint that teaches the task.

One place for the settings that the one-click demo (``webapp.experiments.demo``) launches and that
``bench/bench_tool_learning.py`` measures.
"""

from __future__ import annotations

from typing import Any

DEMONSTRATED_ROWS = 48  # the training rows turned into demonstrations
# Two steps of 4 conversations (about a minute on two cores): every call is then well formed and,
# greedy, every rollout calls the tool (sampled at RL's temperature, about 3 in 4 do), but the model
# has not yet learnt the task itself (it still copies the prompt's example key, or answers something
# other than the value it read). A little more (a third step, or a 10 % higher rate) imitates its way
# to 0.9 and more and leaves RL nothing to do, without lifting the sampled tool use much
# (docs/sft.md#what-the-sft-teaches-and-what-it-leaves-to-rl).
SFT_SETTINGS: dict[str, Any] = {
    "trainer.total_steps": 2,
    "trainer.batch_size": 4,
    "optim.lr": 1e-4,
    "optim.warmup_steps": 3,
    "optim.micro_batch_size": 2,
    "sft.max_length": 512,  # two lookup conversations per packed row
}
# GRPO from that checkpoint: 30 steps, validated on 50 held-out rows.
RL_SETTINGS: dict[str, Any] = {
    "trainer.total_steps": 30,
    "optim.lr": 1e-5,
    "data.val_max_samples": 50,
}
