"""Where one training step spends its time: generation, no-grad passes, forward, loss, backward, optimizer.

    .venv/bin/python bench/profile_step.py [--steps 2] [--threads 2] [--preset grpo] [--throughput]
        [--table 25] [--set path=value ...]

Runs the demo experiment's config (arithmetic recipe, SmolLM2-135M-Instruct, the preset's defaults for
a model of that size), or with ``--throughput`` bench/bench_grpo_throughput.py's config of ours, for
``--steps`` steps, and prints wall-clock time per phase summed over the steps (the first step's
included: compare runs of the same length) and, unless ``--table 0``, the most expensive operators
of the last update under torch.profiler (which slows the update it watches). Not a benchmark (it
names no peer); it is how docs/performance.md's breakdown was measured.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class PhaseTimer:
    """Wall-clock seconds per named phase, summed over calls; a call inside a call of the same phase
    counts once."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: set[str] = set()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name in self._open:
            yield
            return
        self._open.add(name)
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started
            self._open.discard(name)


# (module, function, phase): every call's wall time lands in its phase. Indented phases run inside
# the one above them. The forward phases count the no-grad passes' forwards too. A function that a
# version of the backend does not have is left out.
PHASES = [
    ("loop", "rollout", "rollout (generation, prompts, flows)"),
    ("engine", "TorchGenerationEngine.generate_batch", "  generation (prefill + decode + sampling)"),
    ("loop", "score_rewards", "reward"),
    ("loop", "prepare_update", "advantages and no-grad passes"),
    ("update", "batch_log_probs", "  no-grad log-prob passes (reference / old)"),
    ("update", "micro_logits", "forward: decoder + LM head"),
    ("update", "response_logits", "forward: decoder + LM head"),
    ("update", "packed_hidden", "  decoder"),
    ("update", "response_hidden", "  decoder"),
    ("update", "actor_micro_loss", "log-softmax, entropy, loss"),
    ("autograd", "backward", "backward"),
    ("update", "optimizer_step", "clip + AdamW step"),
    ("loop", "keep_token_signals", "per-token signals for the viewer"),
]


def instrument(timer: PhaseTimer) -> Callable[[], None]:
    """Wrap the step's functions so each call's time lands in its phase; return what unwraps them."""
    from trainer.backends.torch import engine, loop, update

    modules = {"loop": loop, "update": update, "engine": engine, "autograd": torch.autograd}
    wrapped: list[tuple[Any, str, Any]] = []
    for module_name, qualified, phase in PHASES:
        owner: Any = modules[module_name]
        *outer, name = qualified.split(".")
        for part in outer:
            owner = getattr(owner, part)
        original = getattr(owner, name, None)
        if original is None:
            continue

        def timed(*args: Any, _original: Any = original, _phase: str = phase, **kwargs: Any) -> Any:
            with timer.phase(_phase):
                return _original(*args, **kwargs)

        setattr(owner, name, timed)
        wrapped.append((owner, name, original))

    def unwrap() -> None:
        for owner, name, original in reversed(wrapped):
            setattr(owner, name, original)

    return unwrap


def print_phases(timer: PhaseTimer, total_s: float) -> None:
    """Each phase's seconds, and the rest of ``total_s`` (the steps' own time)."""
    print(f"phases over all steps (s; {total_s:.2f} s of steps, load average {os.getloadavg()[0]:.1f}):")
    top_level = 0.0
    for name in dict.fromkeys(name for _, _, name in PHASES):
        if name in timer.seconds:
            print(f"  {timer.seconds[name]:8.2f}  {name}")
            top_level += 0.0 if name.startswith(" ") else timer.seconds[name]
    print(f"  {total_s - top_level:8.2f}  everything else (batching, metrics, reporting)", flush=True)


def throughput_config(workdir: Path, steps: int, sets: Sequence[str]) -> Any:
    """bench/bench_grpo_throughput.py's config of ours (its prompts, model and settings)."""
    from bench.bench_grpo_throughput import PROMPTS_PER_STEP, arithmetic_rows, ours_config
    from trainer.models import smollm2_path

    config = ours_config(
        smollm2_path(), arithmetic_rows(4 * PROMPTS_PER_STEP), total_steps=steps, workdir=workdir
    )
    return config.with_overrides(**parse_sets(sets)) if sets else config


def parse_sets(sets: Sequence[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in sets:
        key, _, raw = item.partition("=")
        overrides[key] = yaml.safe_load(raw)
    return overrides


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
    return RunConfig.from_preset(preset, **overrides | parse_sets(sets))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--preset", default="grpo")
    parser.add_argument(
        "--throughput", action="store_true", help="bench_grpo_throughput's config instead of the demo's"
    )
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--table", type=int, default=25, help="operators to list (0: no torch.profiler)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    from trainer.backends.torch import loop, update
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

    if args.table:
        loop.update_policy = profiled_update  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tmp:
        if args.throughput:
            config = throughput_config(Path(tmp), args.steps, args.sets)
        else:
            config = demo_config(Path(tmp), args.preset, args.steps, args.sets)
        reporter = MemoryReporter()
        loop.train(config, reporter)
    print(f"preset {config.preset}, {args.threads} threads, torch {torch.__version__}")
    for step, metrics in reporter.metrics:
        if "timing/step_s" not in metrics:
            continue  # validation or checkpoint timings
        print(
            f"step {step}: step {metrics['timing/step_s']:.1f} s = rollout {metrics['timing/rollout_s']:.1f} s "
            f"+ update {metrics['timing/update_s']:.1f} s; reward {metrics['reward/mean']:.2f}, "
            f"{metrics.get('actor/skipped_groups', 0):.0f} groups skipped, "
            f"{metrics['perf/generated_tokens']:.0f} tokens"
        )
    print()
    print_phases(timer, sum(m["timing/step_s"] for _, m in reporter.metrics if "timing/step_s" in m))
    if profiles:
        print("\noperators of the last update (self CPU time):")
        print(profiles[-1].key_averages().table(sort_by="self_cpu_time_total", row_limit=args.table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
