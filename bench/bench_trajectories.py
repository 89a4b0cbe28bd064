"""Search over 1,000,000 stored steps, and the trajectory page with token colours for a 4,000-token
response: p50 server time, payload size, bytes stored per step (docs/rollouts.md#search).

One run with BENCH_STEPS single-step trajectories (1,000,000 by default), seeded with SQL the way
ingestion stores them: responses of 40 words drawn from a 5,000-word vocabulary (1,000 distinct
texts), each step's search vector built from its response, and each training step's values of the
histograms' measures as ingestion keeps them (webapp/ingestion/step_values.py). Seeding is one
INSERT ... SELECT per table with the tables' secondary indexes dropped and built after the load, in a
session with synchronous_commit off (about a minute per million steps on a quiet machine). BENCH_KEEP_DB=<folder>
keeps the seeded database there and reuses it on the next run with the same BENCH_STEPS.
Then, over HTTP on loopback against gunicorn, logged in:
- ours: /t/<team>/search/ for a word in 0.1% of the steps and for one in 10%, narrowed to the run
  and team-wide; the group view of one prompt's 8 samples; the peer: the rollout list's first page of
  the same run (a page users already wait for).
- the trajectory page of a 4,000-token step with its six per-token signals; the peer: the same
  page of a step with the same response and no signals.
- a review queue of 50 built from the rollout list (docs/annotations.md#queues): the lowest rewards
  of one training step, of the whole run, and the failures a search finds; each POST builds one.
- histograms over steps (docs/rollouts.md#histograms), over the REST API with a personal token:
  one step's reward histogram, the heat-map of reward over every step, and of advantage (joined
  with each trajectory's first step); the compare page of 8 runs (docs/runs-and-curves.md#compare-runs):
  the big run and 7 more, each with COMPARE_POINTS steps of metrics. Their peer: the rollout list.
Each figure's requests alternate with its peer's, one for one, so both sides see the same load.
Goals: search p50 <= 100 ms at 1,000,000 steps (issue 16); a step's histogram <= 100 ms, the
heat-map over all steps <= 300 ms, the compare of 8 runs <= 200 ms,
a 50-item review queue <= 200 ms (issue 32). Prints figures, each with the load average
it was measured under, ratios, and whether each goal is met (the exit status does not depend on it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _common import load_average, p50, postgres, ratio, setup_django, studio_server, timed_page
from _common import timed as duration
from bench_runs_table import PASSWORD, logged_in

STEPS = int(os.environ.get("BENCH_STEPS", "1000000"))
REQUESTS = int(os.environ.get("BENCH_SEARCH_REQUESTS", "30"))
KEEP = os.environ.get("BENCH_KEEP_DB", "")
TEXTS = 1000
RARE = "okapi"  # in one text of the 1,000: 0.1% of the steps
COMMON = "gnu"  # in one text of ten: 10% of the steps
LONG_TOKENS = 4000
RUN_NAME = "search run"
COMPARED_RUNS = 8
COMPARE_POINTS = max(1, STEPS // 64)  # one metric point per training step of the big run
# Goals (ms of p50 server time): search (issue 16); histograms, compare and queues (issue 32).
SEARCH_GOAL_MS = 100
STEP_HISTOGRAM_GOAL_MS = 100
HEAT_MAP_GOAL_MS = 300
COMPARE_GOAL_MS = 200
QUEUE_GOAL_MS = 200


@dataclass
class Seeded:
    team: str  # slug
    run: int
    with_signals: int  # the 4,000-token trajectory with its six signals
    without: int  # the same response without signals


def _texts() -> list[str]:
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(5000)]
    texts = [" ".join(rng.choice(vocabulary) for _ in range(40)) for _ in range(TEXTS)]
    texts[7] += f" {RARE}"
    for k in range(3, TEXTS, 10):
        texts[k] += f" {COMMON}"
    return texts


@contextlib.contextmanager
def _indexes_built_after(cursor: Any, tables: list[str]) -> Iterator[None]:
    """Drop the tables' secondary indexes (not those behind a constraint) and build them again
    afterwards: one build is far quicker than a million insertions into a GIN index."""
    cursor.execute(
        """SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.schemaname = current_schema()
        AND i.tablename = ANY(%s) AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)""",
        [tables],
    )
    indexes = cursor.fetchall()
    for name, _definition in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    yield
    for _name, definition in indexes:
        cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))  # a partitioned table's: all its parts


class _Phases:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.spent: list[str] = []

    def done(self, what: str) -> None:
        now = time.perf_counter()
        self.spent.append(f"{what} {now - self.started:.0f} s")
        self.started = now


def load(user_name: str) -> Seeded:
    """Seed the run (see the module's docstring); prints how long each part took."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from trainer.contract import TOKEN_SIGNALS, TokenSignalsWire
    from webapp.accounts.models import Team
    from webapp.experiments.models import Experiment, Run
    from webapp.ingestion import step_values
    from webapp.ingestion.models import TextBlob, Trajectory, TrajectoryStep
    from webapp.ingestion.token_signals import pack_token_signals
    from webapp.ingestion.trajectories import SEARCH_CONFIG

    user = get_user_model().objects.create_superuser(user_name, "", PASSWORD)
    team = Team.create_with_owner("bench search", user)
    experiment = Experiment.objects.create(team=team, name="search", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=team, seed=0, name=RUN_NAME)
    texts = _texts()
    hashes = TextBlob.store_many([*texts, "prompt"])
    prompt = hashes["prompt"]
    phases = _Phases()
    with connection.cursor() as cursor:
        # This session's commits need not wait for the disk (nothing here must survive a crash),
        # and the index builds get memory enough to sort in one pass.
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET maintenance_work_mem = '512MB'")
        with _indexes_built_after(cursor, [Trajectory._meta.db_table, TrajectoryStep._meta.db_table]):
            cursor.execute(
                """INSERT INTO results_trajectory (run_id, uid, group_id, sample_index, rollout_index, training_step,
                    data_source, ground_truth, total_reward, success, metrics, info, num_steps, response_tokens,
                    num_tool_calls, num_tool_errors, num_malformed, received)
                SELECT %(run)s, 't' || s, 'g' || (s / 8), (s / 8) %% 500, s %% 8, s / 64, 'gsm8k', '"4"',
                    (s %% 2)::float, s %% 2 = 1, '{}', '{}', 1, 40, 0, 0, 0, now()
                FROM generate_series(0, %(n)s - 1) AS s""",
                {"run": run.pk, "n": STEPS},
            )
            phases.done("trajectories")
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
            phases.done("steps")
        phases.done("indexes")
        cursor.execute("VACUUM ANALYZE")
        phases.done("vacuum analyze")
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
    # What ingestion keeps in the batch's transaction, computed once for the rows loaded with SQL.
    step_values.rebuild(run.pk)
    phases.done("step values")
    print(f"seeding: {', '.join(phases.spent)} ({load_average()})", flush=True)
    return Seeded(team.slug, run.pk, pair[0], pair[1])


def seeded_before() -> Seeded | None:
    """What an earlier run left in BENCH_KEEP_DB (its two long trajectories are seeded last)."""
    from webapp.ingestion.models import Trajectory

    found = {
        t.uid: t
        for t in Trajectory.objects.filter(
            run__name=RUN_NAME, uid__in=["long-signals", "long"]
        ).select_related("run__team")
    }
    if len(found) < 2:
        return None
    run = found["long"].run
    held = Trajectory.objects.filter(run=run).count() - 2
    if held != STEPS:
        raise SystemExit(f"{KEEP} holds {held} steps, not {STEPS}: delete it or set BENCH_STEPS={held}")
    return Seeded(run.team.slug, run.pk, found["long-signals"].pk, found["long"].pk)


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


Call = Callable[[], object]


@dataclass
class Figure:
    p50: float  # seconds
    size: int  # bytes of the page
    load: str  # the load average it was measured under
    peer: float  # the peer's p50 (seconds) over requests interleaved with these
    goal_ms: float | None = None

    def line(self) -> str:
        text = (
            f"p50 {self.p50 * 1000:7.1f} ms, {self.size / 1024:4.0f} KiB, {ratio(self.p50, self.peer)} "
            f"the peer ({self.load})"
        )
        if self.goal_ms is None:
            return text
        met = "met" if self.p50 * 1000 <= self.goal_ms else "NOT met"
        return f"{text}; goal <= {self.goal_ms:.0f} ms {met}"


def fetch(client: httpx.Client, url: str) -> Call:
    return lambda: client.get(url).raise_for_status()


def interleaved(ours: Call, peer: Call) -> tuple[float, float]:
    """Each side's p50 over REQUESTS rounds of one request of ours, then one of the peer: a swing in
    the shared machine's load falls on both sides alike."""
    mine, theirs = [], []
    for _ in range(REQUESTS):
        mine.append(duration(ours))
        theirs.append(duration(peer))
    return p50(mine), p50(theirs)


def timed(
    client: httpx.Client, url: str, must_contain: str, peer: Call, goal_ms: float | None = None
) -> Figure:
    """A page's p50 beside its peer's; the first GET warms up and checks that the page is the one meant."""
    first = client.get(url)
    if first.status_code != 200 or must_contain not in first.text:
        raise RuntimeError(f"{url}: HTTP {first.status_code}, {must_contain!r} missing")
    ours, theirs = interleaved(fetch(client, url), peer)
    return Figure(ours, len(first.content), load_average(), theirs, goal_ms)


def timed_queue(client: httpx.Client, url: str, query: str, peer: Call) -> Figure:
    """p50 server time of building a 50-item review queue (the POST; the redirect is not followed)."""
    client.get(url)  # sets the CSRF cookie
    form = {"order": "lowest reward", "limit": "50", "csrfmiddlewaretoken": client.cookies["csrftoken"]}

    def build() -> None:
        response = client.post(f"{url}queue/?{query}", data=form)
        if response.status_code != 302 or "/queues/" not in response.headers["location"]:
            raise RuntimeError(f"no queue built from {query!r}: HTTP {response.status_code}")

    ours, theirs = interleaved(build, peer)
    return Figure(ours, 0, load_average(), theirs, QUEUE_GOAL_MS)


def main() -> None:
    with postgres(Path(KEEP).resolve() if KEEP else None) as database_url:
        setup_django(database_url)
        started = time.perf_counter()
        seeded = (seeded_before() if KEEP else None) or load("bench")
        print(f"{STEPS} steps ready in {time.perf_counter() - started:.0f} s", flush=True)
        stored = sizes(seeded.with_signals)
        logging.getLogger("httpx").setLevel(logging.WARNING)
        searches: dict[str, Figure] = {}
        with (
            studio_server(database_url) as server,
            contextlib.closing(logged_in(server.url, "bench")) as client,
        ):
            search, run, rollouts = (
                f"/t/{seeded.team}/search/",
                seeded.run,
                f"/t/{seeded.team}/runs/{seeded.run}/rollouts/",
            )
            (rollout_list, _size), list_load = (
                timed_page(client, rollouts, "trajectories", REQUESTS),
                load_average(),
            )
            peer = fetch(client, rollouts)  # the rollout list's first page, the peer of most figures
            for word, share in ((RARE, "0.1%"), (COMMON, "10%")):
                searches[f"search '{word}' ({share} of steps) in the run"] = timed(
                    client, f"{search}?q={word}&run={run}", "matching step", peer, SEARCH_GOAL_MS
                )
                searches[f"search '{word}' team-wide"] = timed(
                    client, f"{search}?q={word}", "matching step", peer, SEARCH_GOAL_MS
                )
                searches[f"search '{word}' in the run's older half of steps"] = timed(
                    client, f"{search}?q={word}&run={run}&step_max={STEPS // 128}", "matching step", peer,
                    SEARCH_GOAL_MS,
                )  # fmt: skip
            group_id = f"g{STEPS // 16}"  # 8 samples of one prompt, halfway through the run
            group = timed(client, f"/t/{seeded.team}/runs/{run}/groups/{group_id}/", group_id, peer)
            plain_url = f"{rollouts}{seeded.without}/"
            page = timed(client, f"{rollouts}{seeded.with_signals}/", "token-view", fetch(client, plain_url))
            plain = timed(client, plain_url, "Response", peer)
            queues = {
                "queue of 50: lowest rewards of one training step": timed_queue(
                    client, rollouts, f"step={STEPS // 128}", peer
                ),
                "queue of 50: lowest rewards of the whole run": timed_queue(client, rollouts, "", peer),
                f"queue of 50: failures with '{COMMON}' (search)": timed_queue(
                    client, rollouts, f"q={COMMON}&success=no", peer
                ),
            }
            studied = study_figures(server.url, client, seeded, peer)
    print(f"{STEPS} steps in one run; each figure's peer measured in turn with it, request by request")
    print(f"{'rollout list first page (the peer of most figures)':52s} p50 {rollout_list * 1000:7.1f} ms "
          f"({list_load})")  # fmt: skip
    for name, figure in searches.items():
        print(f"{name:52s} {figure.line()}")
    print(f"{'group view, the 8 samples of one prompt':52s} {group.line()}")
    print(f"{'trajectory page without signals (its peer)':52s} {plain.line()}")
    print(f"{f'trajectory page, {LONG_TOKENS} tokens with 6 signals':52s} {page.line()}")
    for name, figure in {**studied, **queues}.items():
        print(f"{name:52s} {figure.line()}")
    print(
        f"bytes stored per step (row, indexes, TOAST): {stored['step']:.0f}; of it the search index "
        f"{stored['search index']:.0f}; signals of the {LONG_TOKENS}-token step {stored['signals']:.0f} bytes "
        f"({stored['signals'] / LONG_TOKENS:.1f} per token, 6 signals; 24 raw)"
    )


def compared_runs(seeded: Seeded) -> list[int]:
    """The big run and COMPARED_RUNS - 1 more of its team, each with COMPARE_POINTS steps of reward,
    validation accuracy and generated tokens (seeded once; a kept database has them already)."""
    from django.db import connection

    from trainer.contract import PERF_GENERATED_TOKENS, REWARD_MEAN, val_key
    from webapp.experiments.models import Run
    from webapp.ingestion.metrics_store import key_ids, rebuild_summaries

    big = Run.objects.select_related("experiment").get(pk=seeded.run)
    runs = [big] + [
        Run.objects.get_or_create(
            experiment=big.experiment,
            team=big.team,
            name=f"compared {k}",
            defaults={"seed": k, "config": {"optim": {"lr": 1e-6 * k}, "rollout": {"n": 8}}},
        )[0]
        for k in range(1, COMPARED_RUNS)
    ]
    keys = key_ids([REWARD_MEAN, val_key("gsm8k"), PERF_GENERATED_TOKENS])
    for run in runs:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM results_metricpoint WHERE run_id = %s LIMIT 1", [run.pk])
            if cursor.fetchone():
                continue
            cursor.execute(
                "INSERT INTO results_metricpoint (run_id, key_id, step, value, ts) "
                "SELECT %s, k, s, random(), 1.7e9 + s FROM generate_series(0, %s - 1) AS s "
                "CROSS JOIN unnest(%s::int[]) AS k",
                [run.pk, COMPARE_POINTS, list(keys.values())],
            )
        rebuild_summaries(run.pk)
    return [run.pk for run in runs]


def study_figures(server_url: str, client: httpx.Client, seeded: Seeded, peer: Call) -> dict[str, Figure]:
    """Histograms over the REST API (a personal token) and the compare page of 8 runs."""
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import ApiToken

    ids = compared_runs(seeded)
    token = ApiToken.issue(get_user_model().objects.get(username="bench"), "bench")[1]
    base = f"/api/t/{seeded.team}/runs/{seeded.run}/histograms"
    middle = STEPS // 128  # a step halfway through the run
    compare = f"/t/{seeded.team}/runs/compare/?" + "&".join(f"run={pk}" for pk in ids)
    with httpx.Client(base_url=server_url, timeout=60, headers={"Authorization": f"Bearer {token}"}) as api:
        return {
            "reward histogram of one step (64 trajectories)": timed(
                api, f"{base}/reward?step={middle}", "bins", peer, STEP_HISTOGRAM_GOAL_MS
            ),
            "reward heat-map over every step": timed(
                api, f"{base}/reward/heatmap", "counts", peer, HEAT_MAP_GOAL_MS
            ),
            "advantage heat-map over every step (first steps')": timed(
                api, f"{base}/advantage/heatmap", "counts", peer, HEAT_MAP_GOAL_MS
            ),
            f"compare page of {COMPARED_RUNS} runs": timed(
                client, compare, "compare-results", peer, COMPARE_GOAL_MS
            ),
        }


if __name__ == "__main__":
    main()
