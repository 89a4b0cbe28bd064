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
    assert (config.start_from.run, config.start_from.step, config.start_from.optimizer) == (parent.pk, 2, False)
    assert made.json()["name"] == f"parent · fork of run {parent.pk} at step 2"
    (child,) = Experiment.objects.get(pk=made.json()["id"]).launch().runs
    assert (child.started_from, child.started_from_step, child.seed) == (parent, 2, 3)
    frozen = RunConfig.model_validate(child.config)
    assert frozen.start_from.checkpoint is not None and frozen.start_from.checkpoint.endswith("step_00000002")

    outsider = ApiToken.issue(personas["charlie"], "t")[1]
    assert fork(client, outsider, parent, {"step": 2}).status_code == 404


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
