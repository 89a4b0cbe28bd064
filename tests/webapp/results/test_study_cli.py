"""The REST reads and `studio` commands of comparison and histograms (docs/cli.md#compare-and-histograms,
docs/api.md): `studio compare`, `studio histogram` and `studio prompt` against the live test server
with a personal token; the API's answers stay inside the caller's team."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from django.test import Client

from tests.webapp.trainer_posts import Trainer, trajectory
from trainer.contract import REWARD_MEAN
from trainer.studio.cli import main
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Experiment, Run
from webapp.ingestion import metrics_store


def _runs_with_rollouts(team: Any, client: Client, count: int = 3) -> list[Run]:
    experiment = Experiment.objects.create(team=team, name="study", task="gsm8k", preset="grpo")
    runs = []
    for seed in range(count):
        run = Run.objects.create(
            experiment=experiment,
            team=team,
            seed=seed,
            name=f"seed {seed}",
            config={"optim": {"lr": seed + 1}},
        )
        metrics_store.write_points(
            run.pk,
            "m",
            [{"key": REWARD_MEAN, "step": s, "value": 0.1 * (s + seed), "ts": 1.7e9} for s in range(3)],
        )
        rewards = [0.0, 0.5, 1.0, 1.0]
        Trainer(client, run.pk, str(run.issue_token())).trajectories(
            2,
            [
                trajectory(f"s2-p3-s{k}", "s2-p3", reward, response=f"the answer is {4 + seed}")
                for k, reward in enumerate(rewards)
            ],
        )
        runs.append(run)
    return runs


def test_the_histogram_and_compare_reads_answer_only_inside_the_team(client: Client, personas: Any) -> None:
    runs = _runs_with_rollouts(personas["acme"], client)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(personas['bob'], 't')[1]}"}
    outsider = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(personas['charlie'], 't')[1]}"}
    base = f"/api/t/acme/runs/{runs[0].pk}/histograms"
    found = client.get(f"{base}/reward", **headers).json()
    assert found["step"] == 2 and sum(b["count"] for b in found["bins"]) == 4
    assert [b["count"] for b in found["bins"] if b["count"]] == [1, 1, 2]  # 0, 0.5 and 1 twice
    heat = client.get(f"{base}/tool_calls/heatmap", **headers).json()
    assert heat["steps"] == [[2, 2]] and heat["counts"] == [[4]] and heat["edges"] == [1.0, 2.0]
    assert client.get(f"{base}/height", **headers).status_code == 404
    assert client.get(f"{base}/reward", **outsider).status_code == 404
    assert client.get(f"/api/t/other/runs/{runs[0].pk}/histograms/reward", **outsider).status_code == 404
    ids = {"runs": [r.pk for r in runs]}
    assert client.get("/api/t/acme/runs/compare", ids, **headers).status_code == 200
    assert client.get("/api/t/acme/runs/compare", ids, **outsider).status_code == 404
    assert client.get("/api/t/other/runs/compare", ids, **outsider).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_studio_compares_runs_draws_histograms_and_diffs_one_prompt(
    live_server: Any, personas: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    metrics_store.forget_cached_keys()
    runs = _runs_with_rollouts(personas["acme"], Client())
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    monkeypatch.setenv("STUDIO_URL", live_server.url)
    monkeypatch.setenv("STUDIO_TEAM", "acme")
    monkeypatch.setenv("STUDIO_TOKEN", ApiToken.issue(personas["bob"], "cli")[1])
    runner = CliRunner()

    def studio(*args: Any, code: int = 0) -> str:
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == code, (args, result.output)
        return result.output

    ids = [r.pk for r in runs]
    text = studio("compare", *ids, "--baseline", ids[1])
    assert f"seed 1 ({ids[1]}) *" in text and f"{REWARD_MEAN}, final" in text and "0.4 (+33.3%)" in text
    assert "optim.lr" in text
    found = json.loads(studio("--json", "compare", *ids))
    assert found["baseline"] == ids[0] and [r["id"] for r in found["runs"]] == ids
    refused = runner.invoke(main, ["compare", *map(str, range(1, 10))])
    assert refused.exit_code == 1 and "compare 2 to 8 runs; 9 chosen" in refused.stderr

    bars = studio("histogram", ids[0], "--measure", "reward")
    assert bars.startswith("reward at step 2") and "█" * 40 in bars  # the fullest bin, 1.0 twice
    assert "steps       2-2" in studio("histogram", ids[0], "--measure", "length", "--heatmap")

    diffed = studio("prompt", 3, *(f"{pk}:2" for pk in ids))
    assert f"run {ids[1]}@2: the answer is [-4][+5]" in diffed and "tools calc" in diffed
