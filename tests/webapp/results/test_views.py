from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from tests.webapp.trainer_posts import Trainer, points, trajectory
from webapp.ingestion.metrics_store import key_ids, rebuild_summaries
from webapp.ingestion.models import TextBlob, Trajectory
from webapp.results.models import ReferenceResult


@pytest.fixture
def alice(client: Client, personas: Any) -> Client:
    client.force_login(personas["alice"])
    return client


@pytest.mark.slow
def test_the_curve_of_a_million_points_keeps_the_extremes_and_the_viewer_pages(
    alice: Client, run: Any
) -> None:
    keys = [f"k/{i}" for i in range(10)]
    ids = key_ids(keys)
    with connection.cursor() as cursor:
        # 10 keys x 100,000 steps = 1,000,000 points; k/0 has one spike up and one down.
        cursor.execute(
            "INSERT INTO results_metricpoint (run_id, key_id, step, value, ts) "
            "SELECT %(run)s, k, s, CASE WHEN k = %(k0)s AND s = 31337 THEN 50.0 WHEN k = %(k0)s AND s = 77777 "
            "THEN -50.0 ELSE sin(s / 1000.0) + k END, 1.7e9 + s "
            "FROM generate_series(0, 99999) AS s CROSS JOIN unnest(%(ids)s::int[]) AS k",
            {"run": run.pk, "k0": ids["k/0"], "ids": list(ids.values())},
        )
        cursor.execute(
            "INSERT INTO results_trajectory (run_id, uid, group_id, sample_index, rollout_index, training_step, "
            "data_source, total_reward, success, metrics, info, num_steps, response_tokens, num_tool_calls, "
            "num_tool_errors, num_malformed, received) "
            "SELECT %(run)s, 't' || s, 'g' || (s / 4), s / 4 %% 500, s %% 4, s / 4, 'gsm8k', (s %% 2)::float, "
            "s %% 2 = 1, '{}', '{}', 1, 10, 0, 0, 0, now() FROM generate_series(0, 99999) AS s",
            {"run": run.pk},
        )
        blob = TextBlob.store_many(["step text"])["step text"]
        cursor.execute(
            "INSERT INTO results_trajectorystep (trajectory_id, run_id, index, prompt_id, response_id, done, "
            "num_prompt_tokens, num_response_tokens, info, timings) "
            "SELECT id, run_id, 0, %s, %s, true, 5, 10, '{}', '{}' FROM results_trajectory WHERE run_id = %s",
            [blob, blob, run.pk],
        )
    rebuild_summaries(run.pk)
    query = "&".join(f"key={k}" for k in keys)
    data = alice.get(f"/t/acme/curves.json?run={run.pk}&{query}").json()
    assert len(data["series"]) == 10
    assert all(0 < len(s["value"]) <= 1000 for s in data["series"])
    first = data["series"][0]
    assert first["key"] == "k/0" and max(first["value"]) == 50.0 and min(first["value"]) == -50.0
    assert 31337 in first["step"] and 77777 in first["step"]
    again = alice.get(f"/t/acme/curves.json?run={run.pk}&{query}").json()
    assert again == data  # deterministic
    zoomed = alice.get(f"/t/acme/curves.json?run={run.pk}&key=k/0&lo=31000&hi=31999").json()["series"][0]
    assert zoomed["source"] == "raw" and 50.0 in zoomed["value"] and len(zoomed["value"]) <= 1000
    page = alice.get(f"/t/acme/runs/{run.pk}/rollouts/")
    assert page.status_code == 200
    assert page.content.count(b"<tr>") == 51  # header + one page of 50
    assert b"100000 trajectories" in page.content


def _rollouts(trainer: Trainer) -> None:
    batch = [trajectory(f"s2-p0-s{k}", "s2-p0", float(k % 2)) for k in range(4)]
    batch += [trajectory(f"s2-p1-s{k}", "s2-p1", 1.0) for k in range(4)]
    batch[1]["steps"][0]["tool_calls"][0]["error"] = "malformed"
    assert trainer.trajectories(2, batch).status_code == 200
    assert (
        trainer.trajectories(5, [trajectory(f"s5-p0-s{k}", "s5-p0", 0.0) for k in range(4)], "t5").status_code
        == 200
    )


def test_rollouts_filter_by_step_success_tool_errors_and_reward(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    _rollouts(trainer)
    url = f"/t/acme/runs/{run.pk}/rollouts/"
    assert b"12 trajectories" in alice.get(url).content
    assert b"8 trajectories" in alice.get(url + "?step=2").content
    assert b"6 trajectories" in alice.get(url + "?step=2&success=yes").content
    assert b"1 trajectory" in alice.get(url + "?tool_errors=yes").content
    assert b"4 trajectories" in alice.get(url + "?reward_min=0.5&reward_max=1&step=2&group=s2-p1").content
    fragment = alice.get(url + "?step=5", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="rollout-table")
    assert (
        fragment.content.strip().startswith(b'<div id="rollout-table">') and b"s5-p0-s3" in fragment.content
    )
    assert b"<html" not in fragment.content


def test_a_curve_click_lands_on_the_nearest_step_with_rollouts(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    _rollouts(trainer)
    assert alice.get(f"/t/acme/runs/{run.pk}/rollouts/at/4/")["Location"].endswith("?step=5")
    assert alice.get(f"/t/acme/runs/{run.pk}/rollouts/at/3/")["Location"].endswith("?step=2")


def test_the_trajectory_page_shows_every_step_escaped(alice: Client, trainer: Trainer, run: Any) -> None:
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)"> <tool_call>{"name": "calc"}</tool_call>'
    trainer.trajectories(1, [trajectory("x-s0", "x", 1.0, response=evil)])
    found = Trajectory.objects.get(uid="x-s0")
    page = alice.get(f"/t/acme/runs/{run.pk}/rollouts/{found.pk}/").content.decode()
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert (
        '<mark class="toolcall">&lt;tool_call&gt;{&quot;name&quot;: &quot;calc&quot;}&lt;/tool_call&gt;</mark>'
        in page
    )
    # Step 1's prompt extends step 0's: only the new text is shown, the rest folded away.
    assert '<span class="added">&lt;|assistant|&gt;calc&lt;|tool|&gt;4</span>' in page
    assert "advantage +0.500" in page and "value +0.250" in page and "done" in page


def test_the_group_view_flags_a_group_whose_rewards_are_all_equal(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    _rollouts(trainer)
    mixed = alice.get(f"/t/acme/runs/{run.pk}/groups/s2-p0/").content
    equal = alice.get(f"/t/acme/runs/{run.pk}/groups/s2-p1/").content
    assert b'id="all-equal"' not in mixed and mixed.count(b'<article class="card">') == 4
    assert b'id="all-equal"' in equal
    assert alice.get(f"/t/acme/runs/{run.pk}/groups/nope/").status_code == 404


def test_tool_analytics_count_calls_errors_and_malformed(alice: Client, trainer: Trainer, run: Any) -> None:
    from webapp.results.analytics import tool_stats

    _rollouts(trainer)
    (calc,) = tool_stats(run)
    assert (calc.name, calc.total.calls, calc.total.calls_per_trajectory) == ("calc", 12, 1.0)
    assert calc.total.error_rate == pytest.approx(1 / 12) and calc.total.malformed_rate == pytest.approx(
        1 / 12
    )
    assert [r.steps for r in calc.rows] == ["2", "5"] and calc.rows[0].error_rate == pytest.approx(1 / 8)
    assert b"calc" in alice.get(f"/t/acme/runs/{run.pk}/tools/").content


def test_prompt_learning_curves_classify_rows() -> None:
    from webapp.results.analytics import classify

    assert classify([(1, 0.0), (2, 0.0)]) == ("never solved", None)
    assert classify([(1, 0.0), (2, 0.75), (3, 1.0)]) == ("learned", 2)
    assert classify([(1, 1.0), (2, 0.25)]) == ("regressed", None)
    assert classify([(1, 0.25), (2, 0.0), (3, 0.25)]) == ("unstable", None)
    assert classify([(1, 0.5), (2, 1.0)]) == ("solved from the start", 1)


def test_a_row_sampled_fewer_than_three_times_is_not_called_unstable() -> None:
    from webapp.results.analytics import classify

    assert classify([(1, 0.25)]) == ("too few samples", None)
    assert classify([(1, 0.25), (2, 0.25)]) == ("too few samples", None)
    assert classify([(1, 0.25), (2, 0.25), (3, 0.25)]) == ("unstable", None)


def test_the_prompts_page_lists_rows_by_verdict(alice: Client, trainer: Trainer, run: Any) -> None:
    _rollouts(trainer)
    page = alice.get(f"/t/acme/runs/{run.pk}/prompts/").content.decode()
    assert "never solved (0)" in page and "learned (0)" in page and "regressed (1)" in page


CHATML_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 17 times 3?<|im_end|>\n<|im_start|>assistant\n"
)


def test_the_prompts_page_shows_the_question_not_the_chat_template(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    group = [trajectory(f"s1-p7-s{k}", "s1-p7", 1.0 if k == 0 else 0.0) for k in range(4)]
    for body in group:
        body["steps"][0]["prompt_text"] = CHATML_PROMPT
    assert trainer.trajectories(1, group).status_code == 200
    page = alice.get(f"/t/acme/runs/{run.pk}/prompts/").content.decode()
    cell = page.split('class="prompt-cell"', 1)[1].split("</td>", 1)[0]
    assert "What is 17 times 3?" in cell
    assert "im_start" not in cell and "SmolLM" not in cell
    # Seen at one step only: too few samples to call it unstable, and nothing to compare it with.
    assert "too few samples (1)" in page and "unstable (0)" in page
    assert "compare steps" not in page


def _finished_run(
    experiment: Any, seed: int, values: list[float], client: Client, key: str = "val/gsm8k/acc"
) -> Any:
    from webapp.experiments.models import Run

    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=seed)
    trainer = Trainer(client, run.pk, run.issue_token())
    pts = [{"key": key, "step": i * 10, "value": v, "ts": 1.0 + i} for i, v in enumerate(values)]
    assert trainer.metrics(pts, batch_id=f"v{seed}").status_code == 200
    run.enqueue()
    run.claim("w", "w")
    run.finish("succeeded")
    return run


def test_the_comparison_table_shows_mean_and_std_over_seeds_beside_the_paper(
    alice: Client, experiment: Any, client: Client
) -> None:
    first = _finished_run(experiment, 1, [0.5, 0.9, 0.8], client)
    _finished_run(experiment, 2, [0.6, 0.6], client)
    call_command("import_reference_results", stdout=io.StringIO())
    call_command("import_reference_results", stdout=io.StringIO())
    assert ReferenceResult.objects.count() == 30
    page = alice.get("/t/acme/compare/").content.decode()
    assert "final 70.0 ± 14.1" in page and "best 75.0 ± 21.2" in page and "n=2" in page
    assert "Agent-R1 paper" in page and "83.30" in page
    cell = alice.get("/t/acme/compare/cell/?task=gsm8k&algorithm=grpo")
    assert cell.status_code == 200 and f"/t/acme/runs/{first.pk}/".encode() in cell.content
    rows = list(csv.reader(io.StringIO(alice.get("/t/acme/compare/export.csv").content.decode())))
    assert rows[1] == [
        "ours (this server)",
        "gsm8k",
        "grpo",
        "val/gsm8k/acc",
        "70.00",
        "14.14",
        "75.00",
        "21.21",
        "2",
    ]
    assert any(
        r[:4] == ["Agent-R1 paper (arXiv 2511.14460), Qwen3-4B, reported", "gsm8k", "GRPO", "acc"]
        for r in rows
    )
    markdown = alice.get("/t/acme/compare/export.md").content.decode()
    assert "| ours (this server) | gsm8k | grpo | val/gsm8k/acc | 70.00 |" in markdown
    latex = alice.get("/t/acme/compare/export.tex").content.decode()
    assert r"& alfworld & GRPO & success\_seen & 81.29" in latex and "success_seen" not in latex
    assert r"\begin{tabular}" in latex and "ReAct (no training)" in latex
    assert alice.get("/t/acme/compare/export.pdf").status_code == 404


def test_the_dashboard_shows_running_queued_recent_and_best(
    alice: Client, experiment: Any, client: Client
) -> None:
    from webapp.experiments.models import Run

    _finished_run(experiment, 1, [0.4, 0.7], client)
    running = Run.objects.create(experiment=experiment, team=experiment.team, seed=3, name="live one")
    running.enqueue()
    running.claim("w", "w")
    running.heartbeat(step=3, total_steps=10)
    queued = Run.objects.create(experiment=experiment, team=experiment.team, seed=4, name="waiting one")
    queued.enqueue()
    page = alice.get("/t/acme/").content.decode()
    assert "live one" in page and 'value="3"' in page and "waiting one" in page
    assert "val/gsm8k/acc = 0.700" in page
    poll = alice.get("/t/acme/dashboard/running/")
    assert poll.status_code == 200 and "live one" in poll.content.decode()
    running.finish("succeeded")
    queued.request_cancel()
    assert alice.get("/t/acme/dashboard/running/").status_code == 286  # htmx stops polling


def test_the_curves_page_opens_on_the_default_rl_layout_and_offers_the_other_keys(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    from trainer.contract import ACTOR_KL, REWARD_MEAN, TIMING_STEP_S, val_key

    trainer.metrics(points([REWARD_MEAN, ACTOR_KL, "actor/grad_norm"], range(5)))
    page = alice.get(f"/t/acme/runs/{run.pk}/curves/").content.decode()
    keys = page.split('data-keys="', 1)[1].split('"', 1)[0].split("|")
    assert keys[:3] == [REWARD_MEAN, val_key("gsm8k"), ACTOR_KL] and keys[-1] == TIMING_STEP_S
    assert '<option value="actor/grad_norm">' in page and "uPlot.iife.min.js" in page


def test_curve_points_come_in_step_order(alice: Client, trainer: Trainer, run: Any) -> None:
    import random

    rng = random.Random(3)
    trainer.metrics([{"key": "r", "step": s, "value": rng.random(), "ts": 1.0 + s} for s in range(20_000)])
    for lo, hi in ((None, None), (100, 5000), (0, 300)):
        span = "" if lo is None else f"&lo={lo}&hi={hi}"
        steps = alice.get(f"/t/acme/curves.json?run={run.pk}&key=r{span}").json()["series"][0]["step"]
        assert steps == sorted(steps) and len(steps) == len(set(steps)) and len(steps) <= 1000


def test_a_verl_runs_validation_accuracy_counts_in_the_comparison_table(
    alice: Client, experiment: Any, client: Client
) -> None:
    # verl logs val-core/<data_source>/acc/mean@N through MLflow as .../mean_at_N; it arrives as ours.
    _finished_run(experiment, 1, [0.2, 0.4], client, key="val-core/gsm8k/acc/mean_at_4")
    markdown = alice.get("/t/acme/compare/export.md").content.decode()
    assert "| ours (this server) | gsm8k | grpo | val/gsm8k/acc | 40.00 |" in markdown


def test_runs_that_log_none_of_the_rl_keys_open_on_their_own_keys(
    alice: Client, experiment: Any, client: Client
) -> None:
    from webapp.experiments.models import Run

    own = Run.objects.create(experiment=experiment, team=experiment.team, seed=2)
    Trainer(client, own.pk, own.issue_token()).metrics(points(["loss", "accuracy"], range(5)))
    page = alice.get(f"/t/acme/curves/?run={own.pk}").content.decode()
    assert 'data-keys="accuracy|loss"' in page


def test_torch_and_verl_runs_overlay_on_our_reward_key_by_default(
    alice: Client, experiment: Any, client: Client, trainer: Trainer, run: Any
) -> None:
    from webapp.experiments.models import Run

    trainer.metrics(points(["reward/mean"], range(5)))
    verl_run = Run.objects.create(experiment=experiment, team=experiment.team, seed=2)
    Trainer(client, verl_run.pk, verl_run.issue_token()).metrics(points(["critic/score/mean"], range(5)))
    both = alice.get(f"/t/acme/curves/?run={run.pk}&run={verl_run.pk}").content.decode()
    assert 'data-keys="reward/mean|' in both  # the default layout's first panel
    data = alice.get(f"/t/acme/curves.json?run={run.pk}&run={verl_run.pk}&key=reward/mean").json()
    assert [len(series["step"]) for series in data["series"]] == [5, 5]
