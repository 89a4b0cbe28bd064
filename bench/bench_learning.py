"""Does the demo learn? Reward over wall-clock time: the demo experiment against TRL's GRPOTrainer.

Ours runs the demo experiment exactly as the New-experiment form starts it (arithmetic recipe,
SmolLM2-135M-Instruct, GRPO with the preset's small-model defaults, docs/presets.md) for a fixed
wall-clock budget. TRL's GRPOTrainer gets the same model, prompts, reward function, group size,
batch, learning rate, temperature and reply length, and the same budget. TRL has no tool loop, so
its replies are single-turn (the prompt allows answering directly, which the reward accepts). Each
side runs in a process of its own, ours first, with the environment it is given.

    .venv/bin/python bench/bench_learning.py [--budget-s 600] [--threads 2] [--only ours|trl]

Prints reward over wall-clock time for both, the mean reward of the first and last ``--window``
steps, and validation accuracy (greedy) before and after on ``--val-rows`` held-out rows. Goal: ours
rises by ≥ +0.25 within the budget and reaches TRL's final reward in at most half TRL's time.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._sides import run_sides  # noqa: E402

SIDES = ("ours", "trl")

VAL_ROWS = 50
SEED = 1
# The goals: ours rises by this much within the budget, and reaches TRL's final reward in at
# most this fraction of TRL's time.
RISE_GOAL = 0.25
TIME_GOAL = 0.5


def demo_config(workdir: Path, val_rows: int, sets: Sequence[str] = ()) -> Any:
    """The demo's config: the recipe's data (enough problems for ``val_rows`` held out) and defaults,
    then ``--set path=value`` overrides (both sides read them: TRL's settings come from this config)."""
    from bench.profile_step import parse_sets
    from tasks_lib.registry import PrepareOptions, load_recipes
    from trainer.config import RunConfig

    size = max(400, val_rows * 10)  # the recipe holds out a tenth
    paths = load_recipes().get("arithmetic").prepare(None, workdir, PrepareOptions(size=size))
    return RunConfig.from_preset(
        "grpo",
        **{
            "task": "arithmetic",
            "model.path": "smollm2-135m-instruct",
            "data.train_path": str(paths["train"]),
            "data.val_path": str(paths["val"]),
            "data.val_max_samples": val_rows,
            "trainer.total_steps": 10_000,  # the budget stops it
            "trainer.device": "cpu",
            "trainer.seed": SEED,
        }
        | parse_sets(sets),
    )


def val_accuracy(metrics: dict[str, float]) -> float:
    return next(value for key, value in metrics.items() if key.startswith("val/") and key.endswith("/acc"))


def run_ours(workdir: Path, *, budget_s: float, val_rows: int, sets: Sequence[str] = ()) -> dict[str, Any]:
    from trainer.backends.torch.loop import setup_run, train_step, validate
    from trainer.report.reporters import MemoryReporter

    config = demo_config(workdir, val_rows, sets)
    print(
        f"ours: lr {config.optim.lr}, n {config.rollout.n}, batch {config.trainer.batch_size} prompts, "
        f"mini-batch {config.optim.mini_batch_size}, {config.rollout.max_new_tokens} new tokens, "
        f"temperature {config.rollout.temperature}",
        flush=True,
    )
    val, score = _val_rows(config, val_rows), _task_score()
    run = setup_run(config)
    before = greedy_accuracy(run.models.policy, run.tokenizer, val, config.rollout.max_new_tokens, score)
    tool_before = val_accuracy(validate(run, 0))
    reporter = MemoryReporter()
    started = time.perf_counter()
    points: list[tuple[float, float]] = []
    step = 0
    while time.perf_counter() - started < budget_s:
        step += 1
        metrics = train_step(run, step, reporter)
        points.append((time.perf_counter() - started, metrics["reward/mean"]))
        print(f"  ours step {step}: {points[-1][0]:.0f} s, reward {points[-1][1]:.2f}", flush=True)
    after = greedy_accuracy(run.models.policy, run.tokenizer, val, config.rollout.max_new_tokens, score)
    tool_after = val_accuracy(validate(run, step))
    print(f"ours: val acc with the calculator loop (the run page's) {tool_before:.3f} -> {tool_after:.3f}")
    return {
        "points": points,
        "val_before": before,
        "val_after": after,
        "tool_val_before": tool_before,
        "tool_val_after": tool_after,
        "samples_per_step": _samples(config),
    }


def _val_rows(config: Any, count: int) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return list(pq.read_table(config.data.val_path).to_pylist()[:count])


def _task_score() -> Any:
    from tasks_lib.arithmetic.reward import compute_score

    return compute_score


def _samples(config: Any) -> int:
    return int(config.trainer.batch_size * config.rollout.n)


# -- TRL --------------------------------------------------------------------------------------


def run_trl(workdir: Path, *, budget_s: float, val_rows: int, sets: Sequence[str] = ()) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tasks_lib.arithmetic.reward import compute_score
    from trainer.models import smollm2_path

    config = demo_config(workdir, val_rows, sets)
    rows = pq.read_table(config.data.train_path).to_pylist()
    val = _val_rows(config, val_rows)

    def to_trl(row: dict[str, Any]) -> dict[str, Any]:
        return {"prompt": list(row["prompt"]), "ground_truth": row["reward_model"]["ground_truth"]}

    def reward(completions: Sequence[Any], ground_truth: Sequence[str], **kwargs: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [_score(compute_score, text, truth) for text, truth in zip(texts, ground_truth, strict=True)]

    points: list[tuple[float, float]] = []
    started = time.perf_counter()

    class Budget(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                points.append((time.perf_counter() - started, float(logs["reward"])))
                print(
                    f"  trl step {len(points)}: {points[-1][0]:.0f} s, reward {points[-1][1]:.2f}", flush=True
                )
            if time.perf_counter() - started >= budget_s:
                control.should_training_stop = True

    samples = _samples(config)
    args = GRPOConfig(
        output_dir=str(workdir / "trl"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=samples,
        gradient_accumulation_steps=1,
        num_generations=config.rollout.n,
        max_completion_length=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        learning_rate=config.optim.lr,
        lr_scheduler_type="constant",
        beta=0.0,
        max_steps=10_000,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=SEED,
        dataloader_num_workers=0,
    )
    model_dir = smollm2_path()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    before = greedy_accuracy(model, tokenizer, val, config.rollout.max_new_tokens, compute_score)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list([to_trl(r) for r in rows]),
        processing_class=tokenizer,
        callbacks=[Budget()],
    )
    started = time.perf_counter()
    trainer.train()
    after = greedy_accuracy(trainer.model, tokenizer, val, config.rollout.max_new_tokens, compute_score)
    del trainer, model
    gc.collect()
    return {"points": points, "val_before": before, "val_after": after, "samples_per_step": samples}


def _score(compute_score: Any, text: str, truth: str, key: str = "score") -> float:
    """The task's reward (``score``, what training maximises) or its ``acc`` (correctness alone)."""
    result = compute_score(text, truth, {})
    return float(result.get(key, result["score"]) if isinstance(result, dict) else result)


@torch.no_grad()
def greedy_accuracy(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], new_tokens: int, score: Any
) -> float:
    """Single-turn greedy answers to ``rows``, scored by the task's reward (TRL's side has no tool loop)."""
    model.eval()
    tokenizer.padding_side = "left"
    prompts = [
        tokenizer.apply_chat_template(list(r["prompt"]), tokenize=False, add_generation_prompt=True)
        for r in rows
    ]
    right = 0.0
    for start in range(0, len(prompts), 16):
        batch = tokenizer(prompts[start : start + 16], return_tensors="pt", padding=True)
        out = model.generate(**batch, max_new_tokens=new_tokens, do_sample=False)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        chunk = rows[start : start + 16]
        right += sum(
            _score(score, t, r["reward_model"]["ground_truth"], "acc")
            for t, r in zip(texts, chunk, strict=True)
        )
    return right / len(rows)


# -- report -----------------------------------------------------------------------------------


def summarise(name: str, result: dict[str, Any], window: int) -> dict[str, float]:
    rewards = [reward for _, reward in result["points"]]
    first, last = statistics.fmean(rewards[:window]), statistics.fmean(rewards[-window:])
    print(f"\n{name}: reward over wall-clock time (s, reward):")
    print("  " + ", ".join(f"({t:.0f}, {r:.2f})" for t, r in result["points"]))
    print(
        f"{name}: {len(rewards)} steps; mean reward first {window} steps {first:.3f}, last {window} {last:.3f} "
        f"(change {last - first:+.3f}); val acc {result['val_before']:.3f} -> {result['val_after']:.3f}"
    )
    return {"first": first, "last": last, "gain": last - first}


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def time_to_reach(points: list[tuple[float, float]], target: float, window: int) -> float | None:
    """Seconds until the moving mean over ``window`` steps first reaches ``target``."""
    for end in range(window, len(points) + 1):
        if statistics.fmean(r for _, r in points[end - window : end]) >= target:
            return points[end - 1][0]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--budget-s", type=float, default=600.0, help="training wall-clock per framework")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window", type=int, default=5, help="steps in the first/last reward window")
    parser.add_argument("--val-rows", type=int, default=VAL_ROWS)
    parser.add_argument("--only", choices=["ours", "trl"])
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="path=value over the demo's config, both sides",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    from trainer.plugins import load_plugins

    load_plugins()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"demo task on SmolLM2-135M-Instruct, CPU, {args.threads} threads, {args.budget_s:.0f} s each; "
        f"load average {load}; val acc: greedy single-turn answers on {args.val_rows} held-out rows",
        flush=True,
    )
    results: dict[str, Any] = {}
    if args.only is None:  # each side in a process of its own (bench/_sides.py), ours first
        forwarded = [
            "--budget-s",
            str(args.budget_s),
            "--threads",
            str(args.threads),
            "--val-rows",
            str(args.val_rows),
        ]
        results = {
            name: side["results"][name] for name, side in run_sides(__file__, forwarded, SIDES).items()
        }
        print()
    else:
        runner = run_ours if args.only == "ours" else run_trl
        with tempfile.TemporaryDirectory() as tmp:
            results[args.only] = runner(
                Path(tmp), budget_s=args.budget_s, val_rows=args.val_rows, sets=args.sets
            )
    summaries = {name: summarise(name, result, args.window) for name, result in results.items()}
    if "ours" in summaries:
        gain = summaries["ours"]["gain"]
        print(
            f"goal 1, ours' reward rises by >= +{RISE_GOAL:.2f} in the budget: {gain:+.3f} ({_met(gain >= RISE_GOAL)})"
        )
    if len(summaries) == 2:
        trl_final = summaries["trl"]["last"]
        ours_at = time_to_reach(results["ours"]["points"], trl_final, args.window)
        trl_time = results["trl"]["points"][-1][0]
        fraction = None if ours_at is None else ours_at / trl_time
        shown = "never" if ours_at is None else f"at {ours_at:.0f} s, {fraction:.2f}x TRL's {trl_time:.0f} s"
        met = _met(fraction is not None and fraction <= TIME_GOAL)
        print(
            f"goal 2, ours reaches TRL's final reward ({trl_final:.3f}, mean of its last {args.window} steps) "
            f"in <= {TIME_GOAL:.1f}x TRL's time: {shown} ({met})"
        )
        summaries["ratios"] = {"ours_gain": gain, "time_to_trl_final": -1.0 if fraction is None else fraction}
    if args.json:
        args.json.write_text(json.dumps({"results": results, "summaries": summaries}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
