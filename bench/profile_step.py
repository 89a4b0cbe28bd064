"""Where one training step of the demo spends its time: rollout, reference pass, forward, LM head, loss, backward.

    .venv/bin/python bench/profile_step.py [--steps 2] [--threads 2] [--preset grpo] [--set path=value ...]

Runs the demo experiment's config (arithmetic recipe, SmolLM2-135M-Instruct, the preset's defaults for
a model of that size) for ``--steps`` steps with torch.profiler around the update of the last one,
and prints wall-clock time per phase and the most expensive operators. Not a benchmark (it names
no peer); it is how docs/performance.md's breakdown was measured.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class PhaseTimer:
    """Wall-clock seconds per named phase, summed over calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


def instrument(timer: PhaseTimer) -> None:
    """Wrap the update's functions so each call's time lands in its phase."""
    from trainer.backends.torch import loop, update

    def wrap(module: Any, name: str, phase: str) -> None:
        original = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with timer.phase(phase):
                return original(*args, **kwargs)

        setattr(module, name, timed)

    wrap(loop, "rollout", "rollout (generation + env)")
    wrap(update, "batch_log_probs", "no-grad log-prob passes (reference / old)")
    wrap(update, "response_hidden", "decoder forward")
    wrap(update, "actor_micro_loss", "LM head output -> loss (log-softmax, entropy, KL)")
    wrap(update, "_optimizer_step", "clip + AdamW step")


def demo_config(workdir: Path, preset: str, steps: int, sets: Sequence[str]) -> Any:
    from tasks_lib.registry import PrepareOptions, load_recipes
    from trainer.config import RunConfig

    recipes = load_recipes()
    paths = recipes.get("arithmetic").prepare(None, workdir, PrepareOptions())
    overrides: dict[str, Any] = {
        "task": "arithmetic",
        "model.path": "smollm2-135m-instruct",
        "data.train_path": str(paths["train"]),
        "trainer.total_steps": steps,
        "trainer.device": "cpu",
        "trainer.seed": 1,
    }
    for item in sets:
        key, _, raw = item.partition("=")
        overrides[key] = yaml.safe_load(raw)
    return RunConfig.from_preset(preset, **overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--preset", default="grpo")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--table", type=int, default=25, help="operators to list")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from trainer.backends.torch import update
    from trainer.backends.torch.loop import train
    from trainer.plugins import load_plugins
    from trainer.report.reporters import MemoryReporter

    load_plugins()
    timer = PhaseTimer()
    instrument(timer)
    original_update = update.update_policy
    profiles: list[Any] = []

    def profiled_update(*a: Any, **kw: Any) -> Any:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            result = original_update(*a, **kw)
        profiles.append(prof)
        return result

    from trainer.backends.torch import loop

    loop.update_policy = profiled_update  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        config = demo_config(Path(tmp), args.preset, args.steps, args.sets)
        reporter = MemoryReporter()
        train(config, reporter)
    print(f"preset {config.preset}, {args.threads} threads, torch {torch.__version__}")
    for step, metrics in reporter.metrics:
        print(
            f"step {step}: step {metrics['timing/step_s']:.1f} s = rollout {metrics['timing/rollout_s']:.1f} s "
            f"+ update {metrics['timing/update_s']:.1f} s; reward {metrics['reward/mean']:.2f}, "
            f"{metrics.get('actor/skipped_groups', 0):.0f} groups skipped, "
            f"{metrics['perf/generated_tokens']:.0f} tokens"
        )
    print("\nphases over all steps (s):")
    for name, seconds in sorted(timer.seconds.items(), key=lambda item: -item[1]):
        print(f"  {seconds:8.2f}  {name}")
    if profiles:
        print("\noperators of the last update (self CPU time):")
        print(profiles[-1].key_averages().table(sort_by="self_cpu_time_total", row_limit=args.table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
