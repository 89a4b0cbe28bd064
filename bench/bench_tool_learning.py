"""Does a supervised warm start teach the tool, and does RL build on it? The lookup task, SFT → GRPO
against GRPO alone (docs/sft.md#the-demos-numbers).

The lookup task's answers exist only behind its tool (docs/recipes.md#lookup), so a model that never
calls it scores about 0. This runs, on the torch backend in this process:

1. demonstrations generated from the training rows by the recipe's rule against the real tool;
2. SFT of the model on them (timed), then two evaluations of its checkpoint on the validation rows:
   greedy (its accuracy, which RL is to raise), and ``BENCH_TL_SFT_SAMPLES`` samples a row at the
   temperature RL samples at (its tool use, as RL meets it): the demo's short SFT, which teaches the
   call's format and leaves the task to RL (docs/sft.md#what-the-sft-teaches-and-what-it-leaves-to-rl);
3. GRPO for ``BENCH_TL_RL_STEPS`` steps from that checkpoint (start_from), validated greedily at the end;
4. the same GRPO from the model itself, without SFT.

It prints each figure and whether it meets the issue's goal: SFT in at most 5 minutes; after it,
well-formed calls ≥ 90 % and tool use ≥ 80 % of the sampled rollouts of step 2; RL raising
validation accuracy by ≥ 0.2 over the SFT checkpoint with tool use ≥ 80 % (its last steps); RL without
SFT staying near 0 (≤ 0.05).

    .venv/bin/python bench/bench_tool_learning.py

The full figures take SmolLM2-135M-Instruct about an hour on two cores; a smaller configuration runs
with the environment variables below (BENCH_TL_RL_STEPS=3 BENCH_TL_VAL_ROWS=10 ...). The goals are
judged on whatever ran, and the configuration is printed with them.
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks_lib.lookup import warm_start  # noqa: E402  (after the path)

SFT, RL = warm_start.SFT_SETTINGS, warm_start.RL_SETTINGS
SETTINGS = {  # env var → default: the one-click demo's settings (tasks_lib/lookup/warm_start.py)
    "BENCH_TL_MODEL": "smollm2-135m-instruct",
    "BENCH_TL_DEMOS": str(warm_start.DEMONSTRATED_ROWS),  # training rows demonstrated (one conversation each)
    "BENCH_TL_VAL_ROWS": str(RL["data.val_max_samples"]),
    "BENCH_TL_SFT_STEPS": str(SFT["trainer.total_steps"]),
    "BENCH_TL_SFT_BATCH": str(SFT["trainer.batch_size"]),
    "BENCH_TL_SFT_LR": str(SFT["optim.lr"]),
    # A lookup conversation is about 250 tokens: rows of 512 pack two, and the dense packed attention
    # mask costs memory and time in the square of this length on CPU.
    "BENCH_TL_SFT_MAX_LENGTH": str(SFT["sft.max_length"]),
    "BENCH_TL_SFT_WARMUP": str(SFT["optim.warmup_steps"]),
    "BENCH_TL_SFT_TURNS": SFT["sft.train_turns"],  # all | tool_calls (docs/sft.md#which-turns-are-trained)
    # The SFT checkpoint's tool use is judged on this many samples per validation row, drawn as RL
    # draws its rollouts: 50 rows of 2 samples are 100 rollouts, where RL's first step holds only 16.
    "BENCH_TL_SFT_SAMPLES": "2",
    "BENCH_TL_RL_STEPS": str(RL["trainer.total_steps"]),
    # 4 prompts of 4 samples a step (the demo samples 8 per prompt): half the rollouts on two cores.
    "BENCH_TL_RL_BATCH": "4",
    "BENCH_TL_RL_N": "4",
    "BENCH_TL_RL_LR": str(RL["optim.lr"]),
    "BENCH_TL_THREADS": "2",
}
SFT_BUDGET_S = 300.0
WELL_FORMED_GOAL, TOOL_USE_GOAL, RISE_GOAL, NEAR_ZERO = 0.9, 0.8, 0.2, 0.05
LAST_STEPS = 5  # RL's tool use is judged over its last steps


def setting(name: str) -> str:
    return os.environ.get(name, SETTINGS[name])


def base_fields(workdir: Path, paths: dict[str, Path]) -> dict[str, Any]:
    return {
        "task": "lookup",
        "model.path": setting("BENCH_TL_MODEL"),
        "data.val_path": str(paths["val"]),
        "data.val_max_samples": int(setting("BENCH_TL_VAL_ROWS")),
        "trainer.device": "cpu",
        "trainer.num_threads": int(setting("BENCH_TL_THREADS")),
        "report.console": False,
    }


def prepare(workdir: Path) -> tuple[dict[str, Path], Path, int]:
    """The lookup splits, and the demonstrations of the first BENCH_TL_DEMOS training rows."""
    import pyarrow.parquet as pq

    from tasks_lib.demonstrations import generate, write
    from tasks_lib.registry import PrepareOptions, load_recipes

    demos, val_rows = int(setting("BENCH_TL_DEMOS")), int(setting("BENCH_TL_VAL_ROWS"))
    size = max(demos + val_rows, val_rows * 10) + 10
    paths = load_recipes().get("lookup").prepare(None, workdir / "data", PrepareOptions(size=size))
    rows = pq.read_table(paths["train"]).to_pylist()[:demos]
    outcome = generate(rows)
    return paths, write(outcome, workdir / "demos.parquet"), len(outcome.conversations)


def run_sft(fields: dict[str, Any], demos: Path, workdir: Path) -> tuple[Path, float, list[float]]:
    from trainer.backends.torch.checkpoint_folders import latest_checkpoint
    from trainer.backends.torch.sft import train_sft
    from trainer.config import RunConfig
    from trainer.contract import SFT_LOSS
    from trainer.report.reporters import MemoryReporter

    config = RunConfig.from_preset(
        "grpo",
        **{
            **fields,
            "sft.enabled": True,
            "data.train_path": str(demos),
            "data.val_path": None,
            "trainer.total_steps": int(setting("BENCH_TL_SFT_STEPS")),
            "trainer.batch_size": int(setting("BENCH_TL_SFT_BATCH")),
            "optim.lr": float(setting("BENCH_TL_SFT_LR")),
            "sft.max_length": int(setting("BENCH_TL_SFT_MAX_LENGTH")),
            "optim.micro_batch_size": SFT["optim.micro_batch_size"],
            "optim.warmup_steps": int(setting("BENCH_TL_SFT_WARMUP")),
            "sft.train_turns": setting("BENCH_TL_SFT_TURNS"),
            "trainer.checkpoint_dir": str(workdir / "sft"),
        },
    )
    reporter = MemoryReporter()
    started = time.perf_counter()
    train_sft(config, reporter)
    elapsed = time.perf_counter() - started
    losses = [metrics[SFT_LOSS] for _, metrics in reporter.metrics if SFT_LOSS in metrics]
    checkpoint = latest_checkpoint(workdir / "sft")
    if checkpoint is None:
        raise RuntimeError("the SFT run saved no checkpoint")
    return checkpoint, elapsed, losses


def evaluate_checkpoint(
    fields: dict[str, Any], checkpoint: Path | None, *, samples: int, temperature: float | None
) -> dict[str, float]:
    """Accuracy and tool use of ``samples`` rollouts per validation row, of the checkpoint (None: the
    model), at ``temperature`` (0: greedy; None: the config's rollout temperature, the one RL samples at)."""
    from trainer.backends.torch.evaluate import evaluate
    from trainer.config import RunConfig
    from trainer.contract import EVAL_ACC
    from trainer.report.reporters import MemoryReporter
    from trainer.rollout import tool_use_metrics

    sampling = {"rollout.temperature": temperature} if temperature is not None else {}
    config = RunConfig.from_preset(
        "grpo",
        **{
            **fields,
            "data.train_path": fields["data.val_path"],
            "evaluation.enabled": True,
            "evaluation.checkpoint": str(checkpoint) if checkpoint else None,
            "rollout.n": samples,
            **sampling,
            "trainer.batch_size": 10,
        },
    )
    reporter = MemoryReporter()
    result = evaluate(config, reporter)
    trajectories = [t for _, batch in reporter.trajectories for t in batch]
    return {
        "acc": result.metrics[EVAL_ACC],
        **tool_use_metrics(trajectories),
        "rollouts": float(len(trajectories)),
        "temperature": config.rollout.temperature,
    }


def step_lines() -> Any:
    """A reporter printing one line per RL step (reward, tool use, seconds): a run of tens of minutes
    on a shared machine shows how it goes before its figures."""
    import logging

    from trainer.contract import (
        REWARD_MEAN,
        TIMING_STEP_S,
        TOOLS_CALL_RATE,
        TOOLS_SUCCESS_RATE,
        TOOLS_WELL_FORMED_RATE,
    )
    from trainer.report.reporters import ConsoleReporter, console_logger

    if not console_logger.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("  %(message)s"))
        console_logger.addHandler(handler)
        console_logger.setLevel(logging.INFO)
        console_logger.propagate = False
    keys = (REWARD_MEAN, TOOLS_CALL_RATE, TOOLS_WELL_FORMED_RATE, TOOLS_SUCCESS_RATE, TIMING_STEP_S)
    return ConsoleReporter(keys=keys)


def run_rl(fields: dict[str, Any], train: Path, start: Path | None, workdir: Path) -> dict[str, Any]:
    from trainer.backends.torch.loop import train as train_rl
    from trainer.config import RunConfig
    from trainer.contract import TOOLS_CALL_RATE, TOOLS_WELL_FORMED_RATE, val_key
    from trainer.report.reporters import MemoryReporter, MultiReporter

    config = RunConfig.from_preset(
        "grpo",
        **{
            **fields,
            "data.train_path": str(train),
            "trainer.total_steps": int(setting("BENCH_TL_RL_STEPS")),
            "trainer.batch_size": int(setting("BENCH_TL_RL_BATCH")),
            "rollout.n": int(setting("BENCH_TL_RL_N")),
            "optim.lr": float(setting("BENCH_TL_RL_LR")),
            "optim.mini_batch_size": int(setting("BENCH_TL_RL_BATCH")) * int(setting("BENCH_TL_RL_N")),
            "start_from.run": 1 if start else None,
            "start_from.checkpoint": str(start) if start else None,
        },
    )
    print(f"GRPO from {'the SFT checkpoint' if start else 'the model itself'}, step by step:", flush=True)
    reporter = MemoryReporter()
    started = time.perf_counter()
    result = train_rl(config, MultiReporter([reporter, step_lines()]))
    steps = [metrics for _, metrics in reporter.metrics if TOOLS_CALL_RATE in metrics]
    formed = [m[TOOLS_WELL_FORMED_RATE] for m in steps if TOOLS_WELL_FORMED_RATE in m]
    return {
        "acc": result.metrics.get(val_key("lookup"), 0.0),
        "first_call_rate": steps[0][TOOLS_CALL_RATE] if steps else 0.0,
        "first_well_formed": formed[0] if formed else 0.0,
        "last_call_rate": statistics.fmean(m[TOOLS_CALL_RATE] for m in steps[-LAST_STEPS:]) if steps else 0.0,
        "seconds": time.perf_counter() - started,
    }


def verdict(name: str, value: float, goal: float, *, at_most: bool = False, unit: str = "") -> bool:
    met = value <= goal if at_most else value >= goal
    sign = "≤" if at_most else "≥"
    print(f"  {name:<52} {value:8.3f}{unit}  goal {sign} {goal:g}{unit}  {'met' if met else 'NOT MET'}")
    return met


def main() -> int:
    from trainer.contract import TOOLS_CALL_RATE, TOOLS_WELL_FORMED_RATE

    torch.set_num_threads(int(setting("BENCH_TL_THREADS")))
    print("configuration: " + ", ".join(f"{name}={setting(name)}" for name in SETTINGS), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-tool-learning-") as folder:
        workdir = Path(folder)
        paths, demos, kept = prepare(workdir)
        print(f"demonstrations: {kept} verified conversations", flush=True)
        fields = base_fields(workdir, paths)
        checkpoint, sft_s, losses = run_sft(fields, demos, workdir)
        print(
            f"SFT: {len(losses)} steps in {sft_s:.0f} s, loss {losses[0]:.3f} → {losses[-1]:.3f}", flush=True
        )
        after_sft = evaluate_checkpoint(fields, checkpoint, samples=1, temperature=0.0)
        print(f"SFT checkpoint, greedy on validation: {after_sft}", flush=True)
        sampled = evaluate_checkpoint(
            fields, checkpoint, samples=int(setting("BENCH_TL_SFT_SAMPLES")), temperature=None
        )
        print(f"SFT checkpoint, sampled as RL samples, on validation: {sampled}", flush=True)
        with_sft = run_rl(fields, paths["train"], checkpoint, workdir)
        print(f"GRPO from SFT: {with_sft}", flush=True)
        without = run_rl(fields, paths["train"], None, workdir)
        print(f"GRPO without SFT: {without}", flush=True)
    rl_first_rollouts = int(setting("BENCH_TL_RL_BATCH")) * int(setting("BENCH_TL_RL_N"))
    rollouts = f"{sampled['rollouts']:.0f} rollouts"
    well_formed = sampled.get(TOOLS_WELL_FORMED_RATE, 0.0)  # absent when no rollout called the tool
    print("figures:")
    results = [
        verdict("SFT wall-clock time", sft_s, SFT_BUDGET_S, at_most=True, unit=" s"),
        verdict(f"well-formed calls after SFT (sampled, {rollouts})", well_formed, WELL_FORMED_GOAL),
        verdict(f"tool use after SFT (sampled, {rollouts})", sampled[TOOLS_CALL_RATE], TOOL_USE_GOAL),
        verdict(
            "validation accuracy rise, RL over the SFT checkpoint",
            with_sft["acc"] - after_sft["acc"],
            RISE_GOAL,
        ),
        verdict(f"tool use over RL's last {LAST_STEPS} steps", with_sft["last_call_rate"], TOOL_USE_GOAL),
        verdict("validation accuracy of RL without SFT", without["acc"], NEAR_ZERO, at_most=True),
    ]
    print(
        f"  accuracy: SFT checkpoint {after_sft['acc']:.3f}, after RL {with_sft['acc']:.3f}, RL alone {without['acc']:.3f}"
    )
    print(
        f"  for information, RL's first step ({rl_first_rollouts} rollouts): tool use "
        f"{with_sft['first_call_rate']:.3f}, well-formed calls {with_sft['first_well_formed']:.3f}"
    )
    print(f"{sum(results)} of {len(results)} goals met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
