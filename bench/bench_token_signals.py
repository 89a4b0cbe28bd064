"""Per-token signals sent after their trajectories (verl, docs/rollouts.md#token-signals): steps per
second into Postgres, against storing the trajectories themselves in the same run.

One run on embedded Postgres, our gunicorn on loopback (BENCH_WORKERS workers, two client threads),
gzipped bodies built before the clock starts, the way trainer.report.http.HttpReporter sends them:
- the peer: TrajectoryBatch bodies of 64 trajectories of 3 steps (200-token responses) to
  TRAJECTORIES_PATH;
- the driver's signals: for every stored step, its 200 token texts and four signals (advantage,
  log_prob, entropy, kl), 192 steps per TokenSignalsBatch, written onto steps that have none;
- the workers' signals: ratio and clipped of the same steps without texts, 192 per batch, added to
  what each step has (read, decompress, merge, write back).
Prints steps/s of each and their ratios; no pass/fail. Every step ends with six signals (checked).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random

from _common import make_run, postgres, ratio, setup_django, studio_server
from bench_ingest import gzip_ingest_headers, post_all

from trainer.contract import TOKEN_SIGNALS_PATH, TRAJECTORIES_PATH, encode_floats

BATCHES = int(os.environ.get("BENCH_SIGNAL_BATCHES", "30"))  # x 64 trajectories x 3 steps
TRAJECTORIES = 64
STEPS = 3
TOKENS = 200
WARM_UP = 2  # batches of each kind sent before the clock starts


def _gzip(body: dict[str, object]) -> bytes:
    return gzip.compress(json.dumps(body).encode(), 6)


def trajectory_bodies() -> list[bytes]:
    bodies = []
    for batch in range(BATCHES):
        trajectories = [
            {
                "id": f"t{batch}-{k}",
                "group_id": f"g{batch}-{k // 8}",
                "sample_index": k // 8,
                "total_reward": float(k % 2),
                "steps": [
                    {
                        "index": s,
                        "prompt_text": f"prompt {batch} {k} {s}",
                        "response_text": " ".join(
                            f"w{(batch * 7 + k * 3 + s + i) % 997}" for i in range(TOKENS)
                        ),
                        "num_response_tokens": TOKENS,
                    }
                    for s in range(STEPS)
                ],
            }
            for k in range(TRAJECTORIES)
        ]
        bodies.append(_gzip({"batch_id": f"t{batch}", "training_step": batch, "trajectories": trajectories}))
    return bodies


def signal_bodies(names: tuple[str, ...], with_tokens: bool, prefix: str) -> list[bytes]:
    rng = random.Random(len(names))
    bodies = []
    for batch in range(BATCHES):
        steps = [
            {
                "trajectory_id": f"t{batch}-{k}",
                "step_index": s,
                **({"advantage": 0.25} if with_tokens else {}),
                "token_signals": {
                    "tokens": [f" w{i}" for i in range(TOKENS)] if with_tokens else None,
                    "signals": {
                        name: encode_floats([rng.gauss(0, 1) for _ in range(TOKENS)]) for name in names
                    },
                },
            }
            for k in range(TRAJECTORIES)
            for s in range(STEPS)
        ]
        bodies.append(_gzip({"batch_id": f"{prefix}{batch}", "steps": steps}))
    return bodies


def steps_per_second(url: str, bodies: list[bytes], headers: dict[str, str]) -> float:
    post_all(url, bodies[:WARM_UP], headers)
    seconds = post_all(url, bodies[WARM_UP:], headers)
    return (len(bodies) - WARM_UP) * TRAJECTORIES * STEPS / seconds


def check_every_step_has_six_signals(run_id: int) -> None:
    from webapp.ingestion.models import TrajectoryStep
    from webapp.ingestion.token_signals import unpack_token_signals

    steps = TrajectoryStep.objects.filter(run_id=run_id)
    if steps.count() != BATCHES * TRAJECTORIES * STEPS or steps.filter(token_signals=None).exists():
        raise RuntimeError("not every step was stored with signals")
    for step in steps.order_by("?")[:20]:
        if len(unpack_token_signals(bytes(step.token_signals)).signals) != 6:
            raise RuntimeError(f"step {step.pk} does not hold six signals")


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
        run, run_token, _ = make_run()
        trajectories = trajectory_bodies()
        driver = signal_bodies(("advantage", "log_prob", "entropy", "kl"), True, "d")
        workers = signal_bodies(("ratio", "clipped"), False, "w")
        headers = gzip_ingest_headers(run_token)
        with studio_server(database_url) as server:
            base = server.url
            stored = steps_per_second(base + TRAJECTORIES_PATH.format(run_id=run.pk), trajectories, headers)
            print(
                f"trajectories (64 x 3 steps of 200 tokens per batch):  {stored:>8,.0f} steps/s", flush=True
            )
            signals_url = base + TOKEN_SIGNALS_PATH.format(run_id=run.pk)
            written = steps_per_second(signals_url, driver, headers)
            print(
                f"driver's signals (texts + 4 signals, 192 steps):     {written:>8,.0f} steps/s", flush=True
            )
            added = steps_per_second(signals_url, workers, headers)
            print(f"workers' signals (2 signals added, 192 steps):       {added:>8,.0f} steps/s", flush=True)
        check_every_step_has_six_signals(run.pk)
    print(f"driver's signals / trajectories: {ratio(written, stored)}")
    print(f"workers' signals / driver's:     {ratio(added, written)}")


if __name__ == "__main__":
    main()
