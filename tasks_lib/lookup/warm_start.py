"""The tool-learning demo's two stages on the lookup task (docs/sft.md#the-demos-numbers): a short SFT
on demonstrations that teaches the call format, then GRPO from its checkpoint that teaches the task.

One place for the settings that the one-click demo (``webapp.experiments.demo``) launches and that
``bench/bench_tool_learning.py`` measures.
"""

from __future__ import annotations

from typing import Any

DEMONSTRATED_ROWS = 48  # the training rows turned into demonstrations
# Four steps of 4 conversations (about a minute on two cores), trained on the turns that call the
# tool only: the model learns when and how to call (sampled at RL's temperature, nearly every rollout
# calls, well formed), while the answer after the result stays untrained and is RL's to teach. Trained
# on every turn instead, the call is only ever learnt together with the answer: a short run calls in
# about 3 rollouts of 4, a slightly longer one imitates its way to 0.9 accuracy and leaves RL nothing
# (docs/sft.md#what-the-sft-teaches-and-what-it-leaves-to-rl).
SFT_SETTINGS: dict[str, Any] = {
    "trainer.total_steps": 4,
    "trainer.batch_size": 4,
    "optim.lr": 5e-5,
    "optim.warmup_steps": 1,
    "optim.micro_batch_size": 2,
    "sft.max_length": 512,  # two lookup conversations per packed row
    "sft.train_turns": "tool_calls",  # docs/sft.md#which-turns-are-trained
}
# GRPO from that checkpoint: 30 steps, validated on 50 held-out rows.
RL_SETTINGS: dict[str, Any] = {
    "trainer.total_steps": 30,
    "optim.lr": 1e-5,
    "data.val_max_samples": 50,
}
