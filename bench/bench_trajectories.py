"""Search over 1,000,000 stored steps, and the trajectory page with token colours for a 4,000-token
response: p50 server time, payload size, bytes stored per step (docs/rollouts.md).

One run with BENCH_STEPS single-step trajectories (1,000,000 by default), seeded with SQL the way
ingestion stores them: responses of 40 words drawn from a 5,000-word vocabulary (1,000 distinct
texts), each step's search vector built from its response. Then, over HTTP on loopback against
gunicorn, logged in:
- ours: /t/<team>/search/ for a word in 0.1% of the steps, narrowed to the run and team-wide;
  the peer: the rollout list's first page of the same run (a page users already wait for).
- the trajectory page of a 4,000-token step with its six per-token signals; the peer: the same
  page of a step with the same response and no signals.
Goal (issue 16): search p50 <= 100 ms at 1,000,000 steps. Prints figures and ratios; no pass/fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time

import httpx
from _common import postgres, ratio, setup_django, studio_server, timed_page
from bench_runs_table import PASSWORD, logged_in

STEPS = int(os.environ.get("BENCH_STEPS", "1000000"))
REQUESTS = int(os.environ.get("BENCH_SEARCH_REQUESTS", "30"))
TEXTS = 1000
RARE = "okapi"  # in one text of the 1,000: 0.1% of the steps
LONG_TOKENS = 4000


def _texts() -> list[str]:
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(5000)]
    texts = [" ".join(rng.choice(vocabulary) for _ in range(40)) for _ in range(TEXTS)]
    texts[7] += f" {RARE}"
    return texts


def load(user_name: str) -> tuple[str, int, int, int]:
    """(team slug, run id, trajectory with token signals, the same without) after seeding."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from trainer.contract import TOKEN_SIGNALS, TokenSignalsWire
    from webapp.accounts.models import Team
    from webapp.experiments.models import Experiment, Run
    from webapp.results.models import TextBlob, Trajectory, TrajectoryStep
    from webapp.results.rollouts import SEARCH_CONFIG, pack_token_signals

    user = get_user_model().objects.create_superuser(user_name, "", PASSWORD)
    team = Team.create_with_owner("bench search", user)
    experiment = Experiment.objects.create(team=team, name="search", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=team, seed=0, name="search run")
    texts = _texts()
    hashes = TextBlob.store_many([*texts, "prompt"])
    prompt = hashes["prompt"]
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO results_trajectory (run_id, uid, group_id, sample_index, rollout_index, training_step,
                data_source, ground_truth, total_reward, success, metrics, info, num_steps, response_tokens,
                num_tool_calls, num_tool_errors, num_malformed, received)
            SELECT %(run)s, 't' || s, 'g' || (s / 8), (s / 8) %% 500, s %% 8, s / 64, 'gsm8k', '"4"', (s %% 2)::float,
                s %% 2 = 1, '{}', '{}', 1, 40, 0, 0, 0, now()
            FROM generate_series(0, %(n)s - 1) AS s""",
            {"run": run.pk, "n": STEPS},
        )
        cursor.execute(
            "CREATE TEMP TABLE bench_docs AS SELECT n - 1 AS k, sha256, to_tsvector(%s, text) AS doc "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS u(sha256, text, n)",
            [SEARCH_CONFIG, [hashes[t] for t in texts], texts],
        )
        cursor.execute(
            """INSERT INTO results_trajectorystep (trajectory_id, run_id, index, prompt_id, response_id, reward, done,
                advantage, num_prompt_tokens, num_response_tokens, info, timings, search)
            SELECT t.id, t.run_id, 0, %s, d.sha256, t.total_reward, true, t.total_reward - 0.5, 10, 40, '{}', '{}', d.doc
            FROM results_trajectory t JOIN bench_docs d ON d.k = t.id %% %s WHERE t.run_id = %s""",
            [prompt, TEXTS, run.pk],
        )
        cursor.execute("VACUUM ANALYZE")
    rng = random.Random(1)
    tokens = [f" tok{i % 97}" for i in range(LONG_TOKENS)]
    signals = {name: [rng.gauss(0, 1) for _ in tokens] for name in TOKEN_SIGNALS}
    long_text = TextBlob.store_many(["".join(tokens)])
    pair = []
    for uid, packed in (
        ("long-signals", pack_token_signals(TokenSignalsWire.of(tokens, signals))),
        ("long", None),
    ):
        row = Trajectory.objects.create(
            run=run, uid=uid, group_id=uid, sample_index=0, training_step=0, total_reward=1.0, success=True
        )
        TrajectoryStep.objects.create(
            trajectory=row, run=run, index=0, prompt_id=prompt, response_id=next(iter(long_text.values())),
            num_response_tokens=LONG_TOKENS, token_signals=packed,
        )  # fmt: skip
        pair.append(row.pk)
    return team.slug, run.pk, pair[0], pair[1]


def sizes(long_with_signals: int) -> dict[str, float]:
    from django.db import connection

    with connection.cursor() as cursor:
        # pg_partition_tree: a partitioned table with its partitions (none for a plain table).
        cursor.execute(
            "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('results_trajectorystep')), "
            "pg_total_relation_size('results_trajectorystep')), "
            "coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('step_search')), "
            "pg_relation_size('step_search')), "
            "(SELECT count(*) FROM results_trajectorystep), "
            "(SELECT pg_column_size(token_signals) FROM results_trajectorystep WHERE trajectory_id = %s)",
            [long_with_signals],
        )
        total, index, count, signals = cursor.fetchone()
    return {"step": total / count, "search index": index / count, "signals": float(signals)}


def timed(client: httpx.Client, url: str, must_contain: str) -> tuple[float, int]:
    return timed_page(client, url, must_contain, REQUESTS)


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        started = time.perf_counter()
        slug, run, with_signals, without = load("bench")
        print(f"loaded {STEPS} steps in {time.perf_counter() - started:.0f} s", flush=True)
        stored = sizes(with_signals)
        logging.getLogger("httpx").setLevel(logging.WARNING)
        with (
            studio_server(database_url) as server,
            contextlib.closing(logged_in(server.url, "bench")) as client,
        ):
            search_run, _ = timed(client, f"/t/{slug}/search/?q={RARE}&run={run}", "matching step")
            search_team, _ = timed(client, f"/t/{slug}/search/?q={RARE}", "matching step")
            filtered, _ = timed(client, f"/t/{slug}/search/?q={RARE}&run={run}&success=yes", "matching step")
            rollout_list, _ = timed(client, f"/t/{slug}/runs/{run}/rollouts/", "trajectories")
            page, payload = timed(client, f"/t/{slug}/runs/{run}/rollouts/{with_signals}/", "token-view")
            plain, plain_payload = timed(client, f"/t/{slug}/runs/{run}/rollouts/{without}/", "Response")
    print(f"search '{RARE}' in the run ({STEPS} steps)      p50 {search_run * 1000:7.1f} ms (goal <= 100 ms)")
    print(f"search '{RARE}' team-wide                       p50 {search_team * 1000:7.1f} ms")
    print(f"search '{RARE}' in the run, success=yes         p50 {filtered * 1000:7.1f} ms")
    print(f"rollout list first page (peer)                  p50 {rollout_list * 1000:7.1f} ms; "
          f"search / rollout list: {ratio(search_run, rollout_list)}")  # fmt: skip
    print(
        f"trajectory page, {LONG_TOKENS} tokens with 6 signals  p50 {page * 1000:7.1f} ms, {payload / 1024:.0f} KiB"
    )
    print(f"the same page without signals (peer)            p50 {plain * 1000:7.1f} ms, {plain_payload / 1024:.0f} KiB; "
          f"ratio {ratio(page, plain)}")  # fmt: skip
    print(
        f"bytes stored per step (row, indexes, TOAST): {stored['step']:.0f}; of it the search index "
        f"{stored['search index']:.0f}; signals of the {LONG_TOKENS}-token step {stored['signals']:.0f} bytes "
        f"({stored['signals'] / LONG_TOKENS:.1f} per token, 6 signals; 24 raw)"
    )


if __name__ == "__main__":
    main()
