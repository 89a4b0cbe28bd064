"""The curve workspace's saved layouts and downloads, the run page's summary, and the rollout views'
prompt and per-row links."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.webapp.trainer_posts import Trainer, points, trajectory
from trainer.config import RunConfig
from trainer.contract import ACTOR_KL, REWARD_MEAN, TOOL_USE_KEYS, val_key
from webapp.experiments.models import RunKind
from webapp.results.models import LayoutKind, SavedLayout
from webapp.results.summary import Timing, summarize, timing

pytestmark = pytest.mark.usefixtures("quick_passwords")


@pytest.fixture
def alice(client: Client, personas: Any) -> Client:
    client.force_login(personas["alice"])
    return client


def _panels(client: Client, url: str) -> list[str]:
    return [panel.key for panel in client.get(url).context["panels"]]


def test_each_user_keeps_their_panels_per_experiment(
    alice: Client, personas: Any, trainer: Trainer, run: Any
) -> None:
    trainer.metrics(points([REWARD_MEAN, ACTOR_KL, "actor/grad_norm"], range(5)))
    url = f"/t/acme/runs/{run.pk}/curves/"
    default = _panels(alice, url)
    assert default[:3] == [REWARD_MEAN, val_key("gsm8k"), ACTOR_KL]
    form = {"experiment": run.experiment_id, "run": run.pk, "next": url}
    alice.post("/t/acme/curves/layout/", {**form, "action": "add", "key": "actor/grad_norm"})
    alice.post("/t/acme/curves/layout/", {**form, "action": "remove", "key": val_key("gsm8k")})
    alice.post("/t/acme/curves/layout/", {**form, "action": "log", "key": ACTOR_KL})
    panels = alice.get(url).context["panels"]
    assert [p.key for p in panels] == [k for k in default if k != val_key("gsm8k")] + ["actor/grad_norm"]
    assert [p.key for p in panels if p.log] == [ACTOR_KL]
    # bob's view of the experiment, and alice's team-wide workspace, are untouched
    bob = Client()
    bob.force_login(personas["bob"])
    assert _panels(bob, url) == default
    assert _panels(alice, f"/t/acme/curves/?run={run.pk}") == default
    assert SavedLayout.objects.filter(kind=LayoutKind.CURVES).count() == 1
    alice.post("/t/acme/curves/layout/", {**form, "action": "reset", "key": ""})
    assert _panels(alice, url) == default


def test_a_run_that_logs_tool_use_shows_its_rates_next_to_the_reward(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    trainer.metrics(points([REWARD_MEAN, ACTOR_KL, *TOOL_USE_KEYS], range(5)))
    panels = _panels(alice, f"/t/acme/runs/{run.pk}/curves/")
    assert panels[:4] == [REWARD_MEAN, *TOOL_USE_KEYS]


def test_a_panels_csv_holds_every_raw_point_of_the_zoomed_range(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    trainer.metrics(points([REWARD_MEAN], range(3000)))
    response = alice.get(f"/t/acme/curves.csv?run={run.pk}&key={REWARD_MEAN}&lo=100&hi=1099")
    assert response["Content-Disposition"] == 'attachment; filename="reward_mean.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["run_id", "run", "key", "step", "value", "ts"]
    assert [int(r[3]) for r in rows[1:]] == list(range(100, 1100))  # raw, not the 1,000-bucket downsample
    assert alice.get(f"/t/acme/curves.csv?run={run.pk}").status_code == 404


def test_the_zoomed_curve_is_read_point_by_point(alice: Client, trainer: Trainer, run: Any) -> None:
    trainer.metrics(points([REWARD_MEAN], range(20_000)))
    whole = alice.get(f"/t/acme/curves.json?run={run.pk}&key={REWARD_MEAN}").json()
    zoomed = alice.get(f"/t/acme/curves.json?run={run.pk}&key={REWARD_MEAN}&lo=1200&hi=1300").json()
    assert whole["series"][0]["source"].startswith("summary")
    assert zoomed["series"][0]["source"] == "raw" and zoomed["series"][0]["step"] == list(range(1200, 1301))
    assert zoomed["range"] == {"lo": 1200, "hi": 1300} and zoomed["groups"][0]["runs"] == [run.pk]


def test_timing_gives_duration_and_an_eta_from_the_pace_so_far() -> None:
    start = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    now = start + timedelta(minutes=10)
    assert timing(start, None, 20, 100, True, now) == Timing(600.0, 2400.0)
    assert timing(start, start + timedelta(minutes=3), 100, 100, False, now) == Timing(180.0, None)
    assert timing(None, None, 0, 100, False, now) == Timing(None, None)
    assert timing(start, None, 0, 100, True, now).eta_s is None  # no step done: no pace yet


def test_a_finished_runs_summary_has_latest_and_best_reward_and_validation(
    trainer: Trainer, run: Any
) -> None:
    rewards = [0.1, 0.8, 0.5]
    trainer.metrics(
        [{"key": REWARD_MEAN, "step": s, "value": v, "ts": 1.7e9 + s} for s, v in enumerate(rewards)]
    )
    trainer.metrics([{"key": val_key("gsm8k"), "step": 2, "value": 0.25, "ts": 1.7e9}], batch_id="v")
    summary = summarize(run)
    assert (summary.reward.latest, summary.reward.latest_step, summary.reward.best, summary.reward.best_step) == (
        0.5, 2, 0.8, 1
    )  # fmt: skip
    assert summary.validation is not None and summary.validation.key == val_key("gsm8k")
    assert summary.validation.latest == 0.25


def test_an_sft_runs_summary_names_its_sft_settings_not_the_rl_ones(run: Any) -> None:
    config = RunConfig.from_preset(
        "grpo", task="lookup", **{"sft.enabled": True, "sft.train_turns": "tool_calls"}
    )
    run.kind, run.config = RunKind.SFT, json.loads(config.to_json())
    shown = dict(summarize(run).config)
    assert shown["sft.train_turns"] == "tool_calls" and "sft.max_length" in shown
    assert not {"algorithm.estimator", "rollout.n", "data.reward_rule"} & shown.keys()
    assert summarize(run).reward_rule == ""  # the page says nothing of a reward rule


def test_a_run_without_a_validation_split_shows_no_validation_figure(run: Any) -> None:
    """An SFT run on demonstrations alone never logs val/loss: its page must not wait for it."""
    config = json.loads(RunConfig.from_preset("grpo", task="lookup", **{"sft.enabled": True}).to_json())
    run.kind = RunKind.SFT
    run.config = {**config, "data": {**config["data"], "val_path": None}}
    assert summarize(run).validation is None
    run.config = {**config, "data": {**config["data"], "val_path": "dataset:7"}}
    assert summarize(run).validation is not None  # "not logged yet" until its first evaluation


def test_an_external_run_shows_its_own_progress_and_no_empty_tabs(alice: Client, run: Any) -> None:
    from webapp.experiments.models import EXTERNAL_EXECUTOR, Run, RunStatus

    Run.objects.filter(pk=run.pk).update(executor=EXTERNAL_EXECUTOR, status=RunStatus.RUNNING, step=499)
    page = alice.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "step 499" in page and "of 0" not in page
    nav = page.split('aria-label="Run"', 1)[1].split("</nav>", 1)[0]
    assert "Overview" in nav and "Rollouts" not in nav and "Tools" not in nav and "Curves" not in nav


def test_the_group_view_shows_the_prompt_and_ground_truth_above_the_rollouts(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    assert (
        trainer.trajectories(3, [trajectory(f"s3-p7-s{k}", "s3-p7", float(k)) for k in range(2)]).status_code
        == 200
    )
    page = alice.get(f"/t/acme/runs/{run.pk}/groups/s3-p7/").content.decode()
    prompt_at, truth_at, first_rollout = (
        page.index("What is 2+2?"),
        page.index('id="ground-truth"'),
        page.index("#0"),
    )
    assert prompt_at < truth_at < first_rollout
    assert "&quot;4&quot;" in page[truth_at : truth_at + 40]  # the JSON value, escaped


def test_per_prompt_rows_show_their_prompt_and_open_only_their_rollouts(
    alice: Client, trainer: Trainer, run: Any
) -> None:
    batch = [trajectory(f"s1-p{row}-s{k}", f"s1-p{row}", 1.0) for row in (1, 2) for k in range(2)]
    batch[2]["steps"][0]["prompt_text"] = "<|user|>What is 3+5?"
    assert trainer.trajectories(1, batch).status_code == 200
    page = alice.get(f"/t/acme/runs/{run.pk}/prompts/").content.decode()
    assert "What is 2+2?" in page and "What is 3+5?" in page
    assert f"/t/acme/runs/{run.pk}/rollouts/?sample=2&amp;data_source=gsm8k" in page
    rows = alice.get(f"/t/acme/runs/{run.pk}/rollouts/?sample=2").context["page"].object_list
    assert sorted(t.uid for t in rows) == ["s1-p2-s0", "s1-p2-s1"]
