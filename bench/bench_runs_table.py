"""p50 server time of the runs table's first page with 10,000 runs, against the Django admin's
changelist of the same runs on the same server and database (the plain Django way to list a model).

One team, 10,000 runs in 100 experiments, each with a full RunConfig (as a launched run stores
it), a status, start and end times, and the latest value and the min/max summary of 8 metric keys
(what ingestion keeps; the point table itself is never read by the table). Then, over HTTP on
loopback against gunicorn, logged in:
- ours: /t/<team>/runs/ with its default columns (14, among them the run's kind and reward/mean
  latest and max), as it opens, sorted by a metric, filtered on a config value, and grouped by preset;
- the peer: /admin/experiments/run/ (100 rows of 10 plain columns, its count, newest first).
Goal (issue 15): the first page in <= 100 ms. Prints figures and ratios; no pass/fail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time

import httpx
from _common import postgres, ratio, setup_django, studio_server, timed_page

RUNS = int(os.environ.get("BENCH_RUNS", "10000"))
EXPERIMENTS = 100
REQUESTS = int(os.environ.get("BENCH_TABLE_REQUESTS", "30"))
PASSWORD = "bench-password-not-secret"
KEYS = ("reward/mean", "val/gsm8k/acc", "actor/kl", "actor/entropy", "actor/clipfrac", "response_length/mean",
        "tools/error_rate", "timing/step_s")  # fmt: skip


def load(user_name: str) -> str:
    """The team, its experiments and runs, and their metric tables; returns the team's slug."""
    import json

    from django.contrib.auth import get_user_model
    from django.db import connection

    from trainer.config import RunConfig
    from webapp.accounts.models import Team
    from webapp.experiments.models import Experiment
    from webapp.ingestion.metrics_store import key_ids
    from webapp.ingestion.models import SUMMARY_WIDTHS

    user = get_user_model().objects.create_superuser(user_name, "", PASSWORD)
    team = Team.create_with_owner("bench table", user)
    presets = ["grpo", "ppo", "rloo", "reinforce"]
    experiments = [
        Experiment.objects.create(
            team=team, name=f"exp {i}", task="gsm8k", preset=presets[i % 4], seeds=[1, 2]
        )
        for i in range(EXPERIMENTS)
    ]
    base = {p: json.loads(RunConfig.from_preset(p, task="gsm8k").to_json()) for p in presets}
    with connection.cursor() as cursor:
        # One INSERT ... SELECT: each run's config is its preset's, with its own seed and kl_coef.
        cursor.execute(
            """
            INSERT INTO experiments_run (experiment_id, team_id, name, seed, config, status, executor, executor_ref,
                token_hash, cancel_requested, step, total_steps, message, claimed_by, created, started_at,
                finished_at, mlflow_run_id, labels, note, claimant, launch_key, launch_attempts, refused_records,
                last_refusal, cancel_reason, kind)
            SELECT e.id, %(team)s, 'run ' || s, s %% 5, jsonb_set(jsonb_set(cfg.c, '{trainer,seed}', to_jsonb(s %% 5)),
                       '{algorithm,kl_coef}', to_jsonb((s %% 17) / 1000.0)),
                   (ARRAY['succeeded','failed','running','cancelled'])[1 + s %% 4], 'local', '', '', false,
                   200, 200, '', '', now() - make_interval(mins => s), now() - make_interval(mins => s),
                   now() - make_interval(mins => s) + make_interval(secs => 600 + s %% 3000), md5(s::text), '{}', '',
                   '', '', 1, 0, '', '', 'training'
            FROM generate_series(0, %(n)s - 1) AS s
            JOIN LATERAL (SELECT id, preset FROM experiments_experiment WHERE team_id = %(team)s
                          ORDER BY id OFFSET s %% %(e)s LIMIT 1) AS e ON true
            JOIN (SELECT key AS preset, value AS c FROM jsonb_each(%(configs)s::jsonb)) AS cfg ON cfg.preset = e.preset
            """,
            {"team": team.pk, "n": RUNS, "e": len(experiments), "configs": json.dumps(base)},
        )
        ids = list(key_ids(KEYS).values())
        cursor.execute(
            "INSERT INTO results_metriclatest (run_id, key_id, step, value, ts) "
            "SELECT r.id, k, 199, ((r.id * 7919 + k) %% 1000) / 1000.0, 1.7e9 FROM experiments_run r "
            "CROSS JOIN unnest(%s::int[]) AS k WHERE r.team_id = %s",
            [ids, team.pk],
        )
        cursor.execute(
            "INSERT INTO results_metricsummary (run_id, key_id, level, bucket, n, min_value, min_step, min_ts, "
            "max_value, max_step, max_ts) SELECT r.id, k, %s, 0, 200, 0, 3, 1.7e9, "
            "((r.id * 104729 + k) %% 1000) / 1000.0 + 0.5, 150, 1.7e9 FROM experiments_run r "
            "CROSS JOIN unnest(%s::int[]) AS k WHERE r.team_id = %s",
            [len(SUMMARY_WIDTHS), ids, team.pk],
        )
        cursor.execute("VACUUM ANALYZE")
    return team.slug


def logged_in(server_url: str, username: str) -> httpx.Client:
    client = httpx.Client(base_url=server_url, timeout=60, follow_redirects=False)
    page = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    if token is None:
        raise RuntimeError("no CSRF token on the login page")
    response = client.post(
        "/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": server_url + "/accounts/login/"},
    )
    if response.status_code != 302:
        raise RuntimeError(f"login failed: HTTP {response.status_code}")
    return client


def timed(client: httpx.Client, url: str, must_contain: str) -> float:
    return timed_page(client, url, must_contain, REQUESTS)[0]


def main() -> None:
    with postgres() as database_url:
        setup_django(database_url)
        started = time.perf_counter()
        slug = load("bench")
        print(
            f"loaded {RUNS} runs, {len(KEYS)} metrics each, in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        logging.getLogger("httpx").setLevel(logging.WARNING)
        with (
            studio_server(database_url) as server,
            contextlib.closing(logged_in(server.url, "bench")) as client,
        ):
            table = f"/t/{slug}/runs/"
            ours = {
                "first page": timed(client, table, f"{RUNS} runs"),
                "sorted by reward/mean (latest)": timed(client, table + "?sort=-last:reward/mean", "runs"),
                "filtered on config algorithm.kl_coef": timed(
                    client, table + "?fc=config:algorithm.kl_coef&fo=gt&fv=0.01", "runs"
                ),
                "grouped by preset": timed(client, table + "?group=preset", "groups"),
            }
            admin = timed(client, "/admin/experiments/run/", f"{RUNS} runs")
    for name, value in ours.items():
        print(f"ours, {name:38s} p50 {value * 1000:7.1f} ms")
    print(f"Django admin changelist of Run            p50 {admin * 1000:7.1f} ms")
    print(f"first page: {ours['first page'] * 1000:.1f} ms (goal <= 100 ms); "
          f"admin p50 / ours p50: {ratio(admin, ours['first page'])}")  # fmt: skip


if __name__ == "__main__":
    main()
