"""Fork (docs/checkpoints.md#fork): a new experiment from a run's checkpoint with anything changed, from
the run page's Fork link (the form opens pre-filled), REST and so the CLI; the optimiser state is kept
only from a checkpoint that holds it and for the same algorithm; the lineage is recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.experiments.test_evaluations import FILES, saved_checkpoint
from tests.webapp.experiments.test_start_from import fields, rows  # noqa: F401 (a fixture)
from trainer.config import RunConfig
from trainer.contract import OPTIMIZER_FILE
from webapp.accounts.models import ApiToken
from webapp.experiments.acceptance import accept
from webapp.experiments.models import Experiment, Run, RunStatus

RESUMABLE = {**FILES, OPTIMIZER_FILE: b"adamw"}


@pytest.fixture
def parent(personas: Any, rows: str) -> Run:  # noqa: F811
    """A finished GRPO run of seed 3 with a weights-only checkpoint at step 2 and a resumable one at 4."""
    config = accept(personas["acme"], fields(rows, name="parent", **{"optim.lr": 1e-5}))
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [3])
    run = Run.objects.create(
        experiment=experiment, team=personas["acme"], status=RunStatus.SUCCEEDED, name="parent · seed 3",
        seed=3, config=json.loads(config.to_json()),
    )  # fmt: skip
    saved_checkpoint(run, 2, FILES)
    saved_checkpoint(run, 4, RESUMABLE)
    return run


def fork(client: Client, token: str, run: Run, body: dict[str, Any]) -> Any:
    return client.post(
        f"/api/t/{run.team.slug}/runs/{run.pk}/fork",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_a_rest_fork_changes_what_it_is_told_starts_from_the_checkpoint_and_keeps_the_lineage(
    personas: Any, parent: Run, client: Client
) -> None:
    token = ApiToken.issue(personas["alice"], "t")[1]
    made = fork(client, token, parent, {"step": 2, "config": {"optim.lr": 5e-6, "algorithm.kl_coef": 0.01}})
    assert made.status_code == 201, made.content
    config = RunConfig.model_validate(made.json()["config"])
    assert (config.optim.lr, config.algorithm.kl_coef, config.trainer.seed) == (5e-6, 0.01, 3)
    assert (config.start_from.run, config.start_from.step, config.start_from.optimizer) == (
        parent.pk,
        2,
        False,
    )
    assert made.json()["name"] == f"parent · fork of run {parent.pk} at step 2"
    (child,) = Experiment.objects.get(pk=made.json()["id"]).launch().runs
    assert (child.started_from, child.started_from_step, child.seed) == (parent, 2, 3)
    frozen = RunConfig.model_validate(child.config)
    assert frozen.start_from.checkpoint is not None and frozen.start_from.checkpoint.endswith("step_00000002")

    outsider = ApiToken.issue(personas["charlie"], "t")[1]
    assert fork(client, outsider, parent, {"step": 2}).status_code == 404
    huge = fork(client, token, parent, {"step": 2**40})
    assert huge.status_code == 400 and huge.json()["field"] == "config.start_from.step"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"step": 2}, "holds the weights only"),
        ({"step": 4, "config": {"algorithm.estimator": "rloo"}}, "trained with algorithm.estimator grpo"),
    ],
)
def test_keeping_the_optimiser_state_is_refused_without_one_or_with_another_algorithm(
    personas: Any, parent: Run, client: Client, body: dict[str, Any], words: str
) -> None:
    token = ApiToken.issue(personas["alice"], "t")[1]
    body = {**body, "config": {**body.get("config", {}), "start_from.optimizer": True}}
    refused = fork(client, token, parent, body)
    assert refused.status_code == 422
    assert refused.json()["field"] == "config.start_from.optimizer" and words in refused.json()["error"]
    kept = fork(client, token, parent, {"step": 4, "name": "kept", "config": {"start_from.optimizer": True}})
    assert kept.status_code == 201 and kept.json()["config"]["start_from"]["optimizer"] is True


def test_the_run_pages_fork_link_opens_the_form_filled_in_with_the_runs_config_and_checkpoint(
    personas: Any, parent: Run, client: Client
) -> None:
    client.force_login(personas["alice"])
    slug = personas["acme"].slug
    page = client.get(reverse("run", args=[slug, parent.pk])).content.decode()
    link = f"{reverse('experiment_new', args=[slug])}?fork={parent.pk}&amp;step=4"
    assert link in page
    form = client.get(link.replace("&amp;", "&")).content.decode()
    assert "Fork of parent" in form and "Starting from run" in form
    assert f'name="start_from.run" value="{parent.pk}"' in form and 'name="start_from.step" value="4"' in form
    assert 'name="optim.lr" value="1e-05"' in form
    outsider = Client()
    outsider.force_login(personas["charlie"])
    assert outsider.get(link.replace("&amp;", "&")).status_code == 404


def test_a_resumable_runs_fork_link_opens_the_form_and_the_fork_stays_resumable(
    personas: Any,
    rows: str,  # noqa: F811
    client: Client,
) -> None:
    resumable = {"trainer.resume": True, "trainer.save_every": 2}
    config = accept(personas["acme"], fields(rows, name="resumable", **resumable))
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    run = Run.objects.create(
        experiment=experiment, team=personas["acme"], status=RunStatus.FAILED, name="resumable · seed 1",
        seed=1, config=json.loads(config.to_json()),
    )  # fmt: skip
    saved_checkpoint(run, 2, RESUMABLE)
    client.force_login(personas["alice"])
    answer = client.get(f"{reverse('experiment_new', args=[personas['acme'].slug])}?fork={run.pk}&step=2")
    assert answer.status_code == 200
    form = answer.content.decode()
    assert "Fork of resumable" in form and 'name="trainer.resume"' in form and "checked" in form
    token = ApiToken.issue(personas["alice"], "t")[1]
    made = fork(client, token, run, {"step": 2, "config": {"optim.lr": 1e-6}})
    assert made.status_code == 201, made.content
    assert made.json()["config"]["trainer"]["resume"] is True


def test_the_workspace_draws_a_fork_after_its_parents_first_steps_and_the_comparison_counts_each_run_once(
    personas: Any, parent: Run, client: Client
) -> None:
    from webapp.ingestion import metrics_store
    from webapp.results.analytics import comparison

    child = Run.objects.create(
        experiment=parent.experiment, team=parent.team, name="fork · seed 3", status=RunStatus.SUCCEEDED,
        started_from=parent, started_from_step=2, config=parent.config,
    )  # fmt: skip
    val = "val/arithmetic/acc"
    for run, values in ((parent, {1: 0.1, 2: 0.2, 3: 0.9, 4: 0.3}), (child, {1: 0.4, 2: 0.5, 3: 0.6})):
        points = [
            {"key": key, "step": s, "value": v, "ts": float(s)}
            for s, v in values.items()
            for key in (val, "reward/mean")
        ]
        metrics_store.write_points(run.pk, f"b{run.pk}", points)
    client.force_login(personas["alice"])
    url = reverse("curves_data", args=[parent.team.slug]) + f"?run={child.pk}&key=reward/mean"
    (own,) = client.get(url).json()["series"]
    assert own["step"] == [1, 2, 3]
    (continued,) = client.get(url + "&lineage=1").json()["series"]
    assert (continued["step"], continued["value"], continued["forked_at"]) == (
        [1, 2, 3, 4, 5],
        [0.1, 0.2, 0.4, 0.5, 0.6],
        2,
    )
    (zoomed,) = client.get(url + "&lineage=1&lo=2&hi=3").json()["series"]
    assert zoomed["step"] == [2, 3]
    # Beside its parent the fork's line starts where it leaves it, and the page names the origin.
    both = client.get(url + f"&run={parent.pk}&lineage=1").json()
    drawn = {series["run"]: series["step"] for series in both["series"]}
    assert drawn == {child.pk: [3, 4, 5], parent.pk: [1, 2, 3, 4]}
    origin = {"run": parent.pk, "name": "parent · seed 3", "step": 2}
    assert both["runs"][str(child.pk)]["forked_from"] == origin
    assert both["runs"][str(parent.pk)]["forked_from"] is None
    page = client.get(
        reverse("run_curves", args=[parent.team.slug, child.pk]) + "?lineage=1"
    ).content.decode()
    assert 'id="continue-forks" name="lineage" value="1" checked' in page and "lineage=1&amp;" in page
    # The task x algorithm table: each run its own points; the fork's best is its own 0.6, never the
    # parent's 0.9 after the fork's step that the workspace drew before it.
    cell = comparison(parent.team).cell("arithmetic", "grpo")
    assert cell is not None and dict(zip(cell.run_ids, cell.bests, strict=True)) == {
        parent.pk: 0.9,
        child.pk: 0.6,
    }


def test_studio_runs_fork_makes_the_fork_with_its_changes_and_launches_it(
    transactional_db: Any,
    personas: Any,
    parent: Run,
    live_server: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from trainer.studio.cli import main

    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    token = ApiToken.issue(personas["alice"], "cli")[1]
    runner = CliRunner()
    assert (
        runner.invoke(main, ["login", "--url", live_server.url, "--team", "acme", "--token", token]).exit_code
        == 0
    )
    args = [
        "--json",
        "runs",
        "fork",
        str(parent.pk),
        "--step",
        "4",
        "--set",
        "optim.lr=5e-6",
        "--keep-optimizer",
    ]
    result = runner.invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    assert made["experiment"]["config"]["optim"]["lr"] == 5e-6
    assert made["experiment"]["config"]["start_from"] == {
        "run": parent.pk, "step": 4, "optimizer": True, "checkpoint": made["experiment"]["config"]["start_from"]["checkpoint"]
    }  # fmt: skip
    (run,) = made["runs"]
    assert Run.objects.get(pk=run["id"]).started_from_id == parent.pk
    refused = runner.invoke(main, ["runs", "fork", str(parent.pk), "--step", "2", "--keep-optimizer"])
    assert refused.exit_code != 0 and "holds the weights only" in refused.output + (refused.stderr or "")
