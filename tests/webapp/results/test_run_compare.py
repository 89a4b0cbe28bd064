"""Comparing 2 to 8 runs (docs/runs-and-curves.md#compare-runs) and 3+ rollouts of one prompt across
runs (docs/rollouts.md#same-prompt): what differs by section, results against a baseline, health,
time and tokens; more than 8 refused; other teams' runs never shown."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.webapp.trainer_posts import Trainer, trajectory
from trainer.contract import PERF_GENERATED_TOKENS, REWARD_MEAN
from webapp.experiments.models import Experiment, Run
from webapp.ingestion import metrics_store
from webapp.monitoring.checks import CHECKS
from webapp.monitoring.models import RunHealth
from webapp.results import run_compare


def _run(experiment: Experiment, seed: int, lr: float, rewards: list[float]) -> Run:
    now = timezone.now()
    run = Run.objects.create(
        experiment=experiment,
        team=experiment.team,
        seed=seed,
        name=f"lr {lr}",
        config={"optim": {"lr": lr, "warmup": 0}, "rollout": {"n": 4 + seed % 2}, "seed": seed},
        started_at=now - timedelta(minutes=10 + seed),
        finished_at=now,
        step=len(rewards),
    )
    points = [{"key": REWARD_MEAN, "step": s, "value": v, "ts": 1.7e9 + s} for s, v in enumerate(rewards)]
    points += [
        {"key": PERF_GENERATED_TOKENS, "step": s, "value": 100.0, "ts": 1.7e9} for s in range(len(rewards))
    ]
    metrics_store.write_points(run.pk, f"b{seed}", points)
    return run


@pytest.fixture
def four(experiment: Experiment) -> list[Run]:
    return [
        _run(experiment, 0, 1e-5, [0.1, 0.4, 0.2]),
        _run(experiment, 1, 3e-5, [0.2, 0.6, 0.5]),
        _run(experiment, 2, 1e-4, [0.0, 0.1, 0.1]),
        _run(experiment, 3, 1e-5, [0.3, 0.2]),
    ]


def test_four_runs_side_by_side_against_a_chosen_baseline(
    client: Client, personas: Any, four: list[Run]
) -> None:
    check = CHECKS.names()[0]
    RunHealth.objects.create(run=four[2], check_name=check, firing=True, step=2)
    found = run_compare.compare(four, baseline=1)
    sections = {s.name: [row.path for row in s.rows] for s in found.sections}
    assert sections == {run_compare.TOP_LEVEL: ["seed"], "optim": ["optim.lr"], "rollout": ["rollout.n"]}
    final = next(row for row in found.metrics if row.label == f"{REWARD_MEAN}, final")
    best = next(row for row in found.metrics if row.label == f"{REWARD_MEAN}, best")
    assert final.values == [0.2, 0.5, 0.1, 0.2] and best.values == [0.4, 0.6, 0.1, 0.3]
    assert final.changes[1] is None  # the baseline
    assert final.changes[0] == pytest.approx(-60.0) and best.changes[3] == pytest.approx(-50.0)
    assert [c.tokens for c in found.columns] == [300.0, 300.0, 300.0, 200.0]
    assert [c.firing for c in found.columns] == [[], [], [CHECKS.get(check).label], []]

    client.force_login(personas["bob"])
    query = "&".join(f"run={r.pk}" for r in four)
    page = client.get(f"/t/acme/runs/compare/?{query}&baseline={four[1].pk}")
    assert page.status_code == 200 and page.context["comparison"].baseline == 1
    html = page.content.decode()
    assert "-60.0%" in html and "optim.lr" in html and "optim.warmup" not in html  # only what differs
    assert CHECKS.get(check).label in html and 'id="compare-chart"' in html
    assert "optim.warmup" in client.get(f"/t/acme/runs/compare/?{query}&all=1").content.decode()


def test_two_to_eight_runs_are_compared_and_nine_refused(
    client: Client, personas: Any, experiment: Any
) -> None:
    runs = [Run.objects.create(experiment=experiment, team=experiment.team, seed=s) for s in range(9)]
    client.force_login(personas["alice"])

    def status(chosen: list[Run]) -> int:
        return client.get("/t/acme/runs/compare/", {"run": [r.pk for r in chosen]}).status_code

    assert [status(runs[:n]) for n in (2, 8)] == [200, 200]
    refused = client.get("/t/acme/runs/compare/", {"run": [r.pk for r in runs]})
    assert refused.status_code == 400 and "compare 2 to 8 runs; 9 chosen" in refused.content.decode()
    assert (
        status(runs[:1]) == 200
        and "comparison" not in client.get("/t/acme/runs/compare/", {"run": runs[0].pk}).context
    )
    with pytest.raises(run_compare.CompareRefused):
        run_compare.compare(runs)


def test_another_teams_run_is_never_compared(client: Client, personas: Any, four: list[Run]) -> None:
    theirs = Experiment.objects.create(team=personas["other"], name="x", task="gsm8k", preset="grpo")
    their_run = _run(theirs, 5, 1e-3, [0.9])
    client.force_login(personas["alice"])
    asked = {"run": [four[0].pk, their_run.pk]}
    assert client.get("/t/acme/runs/compare/", asked).status_code == 404
    no_such = {"run": [four[0].pk, 2**70]}  # an id no row can have: a 404 too, not a database error
    assert client.get("/t/acme/runs/compare/", no_such).status_code == 404
    outsider = Client()
    outsider.force_login(personas["charlie"])
    assert outsider.get("/t/acme/runs/compare/", {"run": [r.pk for r in four[:2]]}).status_code == 404


def test_one_prompt_in_three_runs_aligned_step_by_step_with_word_diffs(
    client: Client, personas: Any, four: list[Run]
) -> None:
    responses = ["the answer is 4", "so the answer is 5", "the answer is 4 indeed"]
    for run, response in zip(four[:3], responses, strict=True):
        Trainer(client, run.pk, str(run.issue_token())).trajectories(
            2, [trajectory("s2-p3-s0", "s2-p3", 1.0, response=response)]
        )
    client.force_login(personas["bob"])
    asked = client.get("/t/acme/runs/prompts/compare/", {"run": [r.pk for r in four[:3]], "sample": 3})
    assert asked.status_code == 302
    page = client.get(asked["Location"])
    many = page.context["many"]
    assert [side.trajectory.run_id for side in many.sides] == [r.pk for r in four[:3]]
    assert [step.index for step in many.steps] == [0, 1]  # two steps each, aligned
    last = many.steps[1].cells
    assert last[0].diff is None and ("added", "so ") in last[1].diff and ("added", "5") in last[1].diff
    assert ("added", " indeed") in last[2].diff
    assert many.steps[0].cells[1].tools == ["calc"]
    html = page.content.decode()
    assert 'id="compare-many"' in html and '<span class="added"> indeed</span>' in html
    missing = client.get("/t/acme/runs/prompts/compare/", {"run": [r.pk for r in four[:3]], "sample": 9})
    assert missing.status_code == 404


def test_the_compare_page_offers_the_rows_its_runs_rolled_out_in_common(
    client: Client, personas: Any, four: list[Run]
) -> None:
    client.force_login(personas["bob"])
    ids = {"run": [r.pk for r in four]}
    nothing = client.get("/t/acme/runs/compare/", ids).content.decode()
    assert "No dataset row has rollouts in two of these runs" in nothing and 'name="sample"' not in nothing
    rows = {four[0]: [3, 5], four[1]: [3, 5], four[2]: [3, 8], four[3]: [9]}  # row 3 in three runs, 5 in two
    for run, samples in rows.items():
        posted = [trajectory(f"s1-p{row}-s0", f"s1-p{row}", 1.0) for row in samples]
        Trainer(client, run.pk, str(run.issue_token())).trajectories(1, posted)
    client.force_login(personas["bob"])
    page = client.get("/t/acme/runs/compare/", ids)
    assert page.context["shared_rows"] == [(3, 3), (5, 2)]  # most shared first; 8 and 9 in one run only
    assert "row 3 · in 3 of 4 runs" in page.content.decode()
