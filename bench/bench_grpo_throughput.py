"""GRPO training throughput on CPU: our torch backend against TRL's GRPOTrainer, in one run.

Equal settings (docs/benchmarks.md#trl-grpo-on-cpu): SmolLM2-135M-Instruct in fp32, 4 prompts x 4 samples = 16 completions
per step, 64 new tokens at temperature 1, lr 1e-6, no KL term (TRL's default beta = 0), one optimizer
step per generation batch, no gradient checkpointing, the same torch thread count, the same prompts
and the same reward (the answer contains the right number). Each framework runs ``--warmup`` steps,
then ``--steps`` timed steps, generation and update both inside the timing, in a process of its own
(ours first) with the environment it is given: no OpenMP override for either
(docs/performance.md#cpu-threads).

    .venv/bin/python bench/bench_grpo_throughput.py [--steps 4] [--warmup 1] [--threads 2]

Prints step times, samples/s for each, and the ratio ours / TRL (the issue's goal: ≥ 3x).
"""

from __future__ import annotations

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import gc
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for bench.profile_step (--phases) and bench._sides

from bench._sides import run_sides  # noqa: E402

PROMPTS_PER_STEP = 4
SAMPLES_PER_PROMPT = 4
NEW_TOKENS = 64
LEARNING_RATE = 1e-6
SEED = 0


def arithmetic_rows(count: int) -> list[dict[str, Any]]:
    """Small additions in the data contract (ground truth: the sum). Easy enough that SmolLM2 gets some
    right, so groups have mixed rewards and the update runs, as in real training."""
    rows = []
    for i in range(count):
        a, b = 1 + i % 5, 2 + (3 * i) % 6
        rows.append(
            {
                "data_source": "contains",
                "prompt": [{"role": "user", "content": f"What is {a} + {b}? Answer with the number."}],
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
            }
        )
    return rows


# -- ours -------------------------------------------------------------------------------------


def ours_config(model_dir: Path, rows: list[dict[str, Any]], *, total_steps: int, workdir: Path) -> Any:
    """Our RunConfig for the benchmark's settings (bench/profile_step.py profiles the same one)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.config import RunConfig

    pq.write_table(pa.Table.from_pylist(rows), workdir / "train.parquet")
    return RunConfig.from_preset(
        "grpo",
        **{
            "model.path": str(model_dir),
            "data.train_path": str(workdir / "train.parquet"),
            "data.max_response_length": NEW_TOKENS,
            "rollout.n": SAMPLES_PER_PROMPT,
            "rollout.max_new_tokens": NEW_TOKENS,
            "rollout.max_steps": 1,
            "rollout.temperature": 1.0,
            "rollout.agent_name": "single_step",
            "algorithm.kl_mode": "none",
            "algorithm.skip_zero_advantage_groups": True,  # TRL still runs the update for tied groups
            "optim.lr": LEARNING_RATE,
            "optim.mini_batch_size": PROMPTS_PER_STEP * SAMPLES_PER_PROMPT,
            "optim.micro_batch_size": PROMPTS_PER_STEP * SAMPLES_PER_PROMPT,
            "trainer.batch_size": PROMPTS_PER_STEP,
            "trainer.total_steps": total_steps,
            "trainer.seed": SEED,
            "trainer.device": "cpu",
        },
    )


def run_ours(
    model_dir: Path,
    rows: list[dict[str, Any]],
    *,
    steps: int,
    warmup: int,
    workdir: Path,
    phases: bool = False,
) -> dict[str, Any]:
    from trainer.backends.torch import loop
    from trainer.report.reporters import MemoryReporter

    config = ours_config(model_dir, rows, total_steps=warmup + steps, workdir=workdir)
    reporter = MemoryReporter()
    if phases:  # bench/profile_step.py's phase timers around our steps (warm-up included), then off
        from bench.profile_step import PhaseTimer, instrument, print_phases

        timer = PhaseTimer()
        unwrap = instrument(timer)
        try:
            loop.train(config, reporter)
        finally:
            unwrap()
        print_phases(timer, sum(m["timing/step_s"] for _, m in reporter.metrics))
    else:
        loop.train(config, reporter)
    timed = reporter.metrics[warmup:]
    return {
        "step_s": [m["timing/step_s"] for _, m in timed],
        "rollout_s": [m["timing/rollout_s"] for _, m in timed],
        "update_s": [m["timing/update_s"] for _, m in timed],
        "generated_tokens": [m["perf/generated_tokens"] for _, m in timed],
        "skipped_groups": [m.get("actor/skipped_groups", 0.0) for _, m in timed],
        "reward_mean": [m["reward/mean"] for _, m in timed],
    }


# -- TRL --------------------------------------------------------------------------------------


class StepTimer(TrainerCallback):
    """Seconds from on_step_begin to on_step_end: GRPO's generation, scoring, forward, backward, step."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.times.append(time.perf_counter() - self.started)


def contains_answer(completions: Sequence[Any], ground_truth: Sequence[str], **kwargs: Any) -> list[float]:
    """Our ``contains`` reward in TRL's reward-function shape: 1 when the completion holds the answer."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [float(truth in text) for text, truth in zip(texts, ground_truth, strict=True)]


def run_trl(
    model_dir: Path, rows: list[dict[str, Any]], *, steps: int, warmup: int, workdir: Path
) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list(
        [{"prompt": row["prompt"], "ground_truth": row["reward_model"]["ground_truth"]} for row in rows]
    )
    args = GRPOConfig(
        output_dir=str(workdir / "trl"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=PROMPTS_PER_STEP * SAMPLES_PER_PROMPT,
        gradient_accumulation_steps=1,
        num_generations=SAMPLES_PER_PROMPT,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        beta=0.0,
        max_steps=warmup + steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=SEED,
        dataloader_num_workers=0,
    )
    timer = StepTimer()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    trainer = GRPOTrainer(
        model=model, reward_funcs=contains_answer, args=args, train_dataset=dataset, processing_class=tokenizer,
        callbacks=[timer],
    )  # fmt: skip
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry][warmup:]
    result = {
        "step_s": timer.times[warmup:],
        "completion_length": [entry.get("completions/mean_length", float("nan")) for entry in logs],
        "reward_mean": [entry["reward"] for entry in logs],
    }
    del trainer, model
    gc.collect()
    return result


# -- report -----------------------------------------------------------------------------------


def summarise(name: str, result: Mapping[str, Any]) -> dict[str, float]:
    median = statistics.median(result["step_s"])
    samples = PROMPTS_PER_STEP * SAMPLES_PER_PROMPT
    summary = {"median_step_s": median, "samples_per_s": samples / median}
    steps = ", ".join(f"{s:.2f}" for s in result["step_s"])
    print(
        f"{name:<5} step s: [{steps}]  median {median:.2f} s  ->  {samples / median:.3f} samples/s",
        flush=True,
    )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per framework")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads for both")
    parser.add_argument("--only", choices=["ours", "trl"], help="run one side only")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--phases", action="store_true", help="also print where our steps spend their time")
    args = parser.parse_args(argv)
    if args.only is None:
        return compare(args)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)

    from trainer.models import smollm2_path

    model_dir = smollm2_path()
    rows = arithmetic_rows(4 * PROMPTS_PER_STEP)
    print(
        f"{args.only}: GRPO step, SmolLM2-135M-Instruct fp32 on CPU, {args.threads} threads: {PROMPTS_PER_STEP} "
        f"prompts x {SAMPLES_PER_PROMPT} samples, {NEW_TOKENS} new tokens, lr {LEARNING_RATE}; "
        f"{args.warmup} warm-up + {args.steps} timed steps (torch {torch.__version__}); "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.only == "ours":
            ours = results["ours"] = run_ours(
                model_dir, rows, steps=args.steps, warmup=args.warmup, workdir=Path(tmp), phases=args.phases
            )
            summarise("ours", ours)
            print(
                "ours  rollout s: " + ", ".join(f"{s:.2f}" for s in ours["rollout_s"])
                + "  update s: " + ", ".join(f"{s:.2f}" for s in ours["update_s"])
                + "  groups skipped (all-equal rewards): "
                + ", ".join(f"{g:.0f}/4" for g in ours["skipped_groups"]),
                flush=True,
            )  # fmt: skip
        else:
            results["trl"] = run_trl(model_dir, rows, steps=args.steps, warmup=args.warmup, workdir=Path(tmp))
            summarise("trl", results["trl"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


def compare(args: argparse.Namespace) -> int:
    """Ours, then TRL, each in a process of its own (bench/_sides.py); then the ratio."""
    forwarded = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    sides = run_sides(__file__, forwarded + (["--phases"] if args.phases else []), ["ours", "trl"])
    results: dict[str, Any] = {name: side[name] for name, side in sides.items()}
    print()
    summaries = {name: summarise(name, result) for name, result in results.items()}
    ratio = summaries["ours"]["samples_per_s"] / summaries["trl"]["samples_per_s"]
    print(f"ratio ours/TRL (samples/s): {ratio:.2f}x; load average {os.getloadavg()[0]:.1f}")
    results["ratio"] = ratio
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
