"""The torch update's speed paths against the path they replace, on one fixed batch of the demo.

One rollout of the demo experiment (arithmetic, SmolLM2-135M-Instruct, GRPO with the small-model
defaults of docs/presets.md: 4 prompts x 4 samples, one on-policy mini-batch, KL in the loss), then
the advantage + update phase on that same batch, from the same weights, several ways:

- ``recomputed π_old``: an earlier path, a separate no-grad forward for the old log-probs even
  though the batch is one on-policy mini-batch (``is_on_policy`` forced false), rows padded;
- ``padded``: π_old reused (the detached current log-probs, ratio 1), micro-batches padded (shared
  prompts, responses padded to the longest);
- ``packed``: the current path, π_old reused and micro-batches packed without padding
  (docs/performance.md#packed-batches). All three are the same update: the bench prints the largest
  weight difference of each against ``padded``;
- ``LoRA r16``: ``model.lora_rank: 16``, adapters trained instead of every weight, and π_ref is the
  policy with its adapters off (no second model). A different training method, so only its speed
  is compared.

    .venv/bin/python bench/bench_update_paths.py [--repeats 2] [--threads 2] [--paths padded,packed]

Prints the median seconds of each and the ratios against the first path named.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import copy
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


def demo_config(workdir: Path, **overrides: Any) -> Any:
    from tasks_lib.registry import PrepareOptions, load_recipes
    from trainer.config import RunConfig

    paths = load_recipes().get("arithmetic").prepare(None, workdir, PrepareOptions())
    return RunConfig.from_preset(
        "grpo",
        **{
            "task": "arithmetic",
            "model.path": "smollm2-135m-instruct",
            "data.train_path": str(paths["train"]),
            "trainer.device": "cpu",
            "trainer.seed": 1,
            # Time the update of the whole batch, whatever its rewards (tied groups would skip it).
            "algorithm.skip_zero_advantage_groups": False,
            **overrides,
        },
    )


def rollout_batch(run: Any) -> Any:
    """One rollout of step 1, scored and flattened into step rows."""
    from trainer.backends.torch.batch import flatten
    from trainer.backends.torch.data import batch_for_step
    from trainer.backends.torch.loop import rollout, sampling_params
    from trainer.rollout import score_rewards

    config = run.config
    prompts = batch_for_step(
        run.train_rows, 1, config.trainer.batch_size, seed=config.trainer.seed, shuffle=config.data.shuffle
    )
    trajectories = rollout(
        prompts,
        n=config.rollout.n,
        sampling=sampling_params(config),
        engine=run.engine,
        tokenizer=run.tokenizer,
        config=config,
        tag="bench",
    )
    score_rewards(trajectories, prompts, config.rollout.n)
    return flatten([t for t in trajectories if t.steps])


def timed_update(run: Any, rows: Any) -> tuple[float, dict[str, torch.Tensor]]:
    """Seconds of advantages + update on ``rows``, and the policy's weights after it."""
    from trainer.backends.torch.loop import set_learning_rates
    from trainer.backends.torch.update import prepare_update, update_policy

    started, cpu_started = time.perf_counter(), time.process_time()
    prepared = prepare_update(rows, run.models, run.config)
    set_learning_rates(run, 1)
    update_policy(rows, prepared, run.models, run.config, generator=torch.Generator().manual_seed(2))
    seconds = time.perf_counter() - started
    # CPU seconds too: on a shared machine wall-clock time follows the load, CPU time much less so.
    print(f"    {time.process_time() - cpu_started:.1f} CPU s", flush=True)
    return seconds, {k: v.detach().clone() for k, v in run.models.policy.state_dict().items()}


def restore(run: Any, weights: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
    run.models.policy.load_state_dict(weights)
    run.models.actor_optimizer.load_state_dict(copy.deepcopy(optimizer_state))


# name -> (π_old forced to its own pass, packed micro-batches)
PATHS = {"recomputed π_old": (True, False), "padded": (False, False), "packed": (False, True)}
LORA = "LoRA r16"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--paths", default=",".join([*PATHS, LORA]), help="comma-separated, in order")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.paths.split(",")]
    unknown = set(names) - {*PATHS, LORA}
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; choose from {[*PATHS, LORA]}")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)

    from trainer.backends.torch import update
    from trainer.backends.torch.loop import setup_run
    from trainer.plugins import load_plugins

    load_plugins()
    on_policy = update.is_on_policy
    seconds: dict[str, list[float]] = {name: [] for name in names}
    after: dict[str, dict[str, torch.Tensor]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        run = setup_run(demo_config(Path(tmp)))
        rows = rollout_batch(run)
        tokens = int(rows.response_mask.sum())
        print(
            f"demo batch: {len(rows.trajectories)} trajectories, {rows.num_rows} step rows, {tokens} response "
            f"tokens; SmolLM2-135M fp32, {args.threads} threads, torch {torch.__version__}",
            flush=True,
        )
        start_weights = {k: v.detach().clone() for k, v in run.models.policy.state_dict().items()}
        start_optimizer = copy.deepcopy(run.models.actor_optimizer.state_dict())
        for _ in range(args.repeats):  # alternate the paths, so a change in load hits each alike
            for name in [n for n in names if n in PATHS]:
                forced, pack = PATHS[name]
                restore(run, start_weights, start_optimizer)
                update.is_on_policy = (lambda *a, **k: False) if forced else on_policy  # type: ignore[assignment]
                run.models.pack_sequences = pack
                took, after[name] = timed_update(run, rows)
                seconds[name].append(took)
                print(f"  {name}: {took:.2f} s", flush=True)
        update.is_on_policy = on_policy  # type: ignore[assignment]
        del run
        if LORA in names:
            lora = setup_run(demo_config(Path(tmp), **{"model.lora_rank": 16, "model.lora_alpha": 32}))
            for _ in range(args.repeats):
                took, _weights = timed_update(lora, rows)
                seconds[LORA].append(took)
                print(f"  {LORA}: {took:.2f} s", flush=True)
    baseline = statistics.median(seconds[names[0]])
    print(f"\nadvantages + update of one demo batch (median s, speed-up against {names[0]}):")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"  {name:<18} {median:7.2f} s   {baseline / median:5.2f}x")
    if "padded" in after:
        for name in [n for n in after if n != "padded"]:
            difference = max(float((after[name][k] - after["padded"][k]).abs().max()) for k in start_weights)
            print(f"same update: largest weight difference {name} vs padded = {difference:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
