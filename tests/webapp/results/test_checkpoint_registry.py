"""Keep-policies and the checkpoint registry (docs/checkpoints.md#keep-policies,
docs/checkpoints.md#the-registry): the policy is checked when the experiment is made and applied as
each checkpoint arrives through the ingestion API; the registry lists the team's checkpoints only,
filtered, sorted and paged, with their evaluations, tags and the bytes the deletions saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.experiments.test_evaluations import saved_checkpoint
from tests.webapp.experiments.test_start_from import demos, fields, rows  # noqa: F401 (fixtures)
from tests.webapp.trainer_posts import Trainer
from trainer.config import RunConfig
from trainer.contract import CHECKPOINTS_PATH, EVAL_ACC, REWARD_MEAN
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion.models import TRAINER_DELETED, Checkpoint
from webapp.results import checkpoint_registry
from webapp.retention.checkpoint_policy import KeepPolicy

REWARDS = {1: 0.2, 2: 0.9, 3: 0.1, 4: 0.3, 5: 0.4, 6: 0.5}


def create(client: Client, token: str, train: str, policy: dict[str, Any], **config: Any) -> Any:
    body = {"config": fields(train, name="kept", **config), "seeds": [1], "checkpoint_policy": policy}
    return client.post(
        "/api/t/acme/experiments", json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


def post_checkpoint(trainer: Trainer, run: Run, step: int) -> Path:
    folder = Path(checkpoint_dir(run)) / f"step_{step:08d}"
    (folder / "policy").mkdir(parents=True)
    (folder / "policy" / "model.safetensors").write_bytes(b"w" * 1000)
    body = {"batch_id": f"c{step}", "step": step, "path": str(folder), "size_bytes": 1000,
            "metrics": {REWARD_MEAN: REWARDS[step]}}  # fmt: skip
    assert trainer.post(CHECKPOINTS_PATH, body).status_code == 200
    return folder


def test_a_keep_policy_deletes_as_checkpoints_arrive_what_none_of_its_rules_keeps(
    personas: Any,
    rows: str,  # noqa: F811
    client: Client,
    django_capture_on_commit_callbacks: Any,
) -> None:
    token = ApiToken.issue(personas["alice"], "t")[1]
    policy = {"keep_last": 1, "keep_every": 4, "keep_best_metric": REWARD_MEAN, "keep_best_count": 1}
    made = create(client, token, rows, policy)
    assert made.status_code == 201, made.content
    # the trainer keeps every checkpoint: the web app's policy decides what stays
    assert RunConfig.model_validate(made.json()["config"]).trainer.keep_checkpoints is None
    (run,) = Experiment.objects.get(pk=made.json()["id"]).launch().runs
    trainer = Trainer(client, run.pk, str(run.issue_token()))
    folders = {}
    with django_capture_on_commit_callbacks(execute=True):
        for step in (1, 2, 3):
            folders[step] = post_checkpoint(trainer, run, step)
        Checkpoint.objects.filter(run=run, step=3).update(tags=["candidate"])  # a tag protects it
        for step in (4, 5, 6):
            folders[step] = post_checkpoint(trainer, run, step)
    kept = dict(Checkpoint.objects.filter(run=run).values_list("step", "deleted"))
    # best reward (2), every 4th (4), the newest (6), the tagged one (3)
    assert kept == {1: True, 2: False, 3: False, 4: False, 5: True, 6: False}
    assert {step for step, folder in folders.items() if folder.exists()} == {2, 3, 4, 6}
    deleted_by = Checkpoint.objects.get(run=run, step=5).deleted_by
    assert deleted_by == f"the keep-policy ({KeepPolicy(1, 4, REWARD_MEAN).describe()})"
    saved = checkpoint_registry.totals(personas["acme"], checkpoint_registry.RegistryQuery())
    assert (saved["saved_bytes"], saved["policy_saved_bytes"], saved["kept_count"]) == (2000, 2000, 4)


@pytest.mark.parametrize(
    ("policy", "config", "words"),
    [
        ({"keep_best_metric": "val/arithmetic/acc"}, {}, "no validation split"),
        ({"keep_best_metric": "sft/loss"}, {}, "is an SFT run's"),
        ({"keep_best_metric": EVAL_ACC}, {}, "evaluation's score"),
    ],
)
def test_a_keep_policy_whose_metric_the_runs_never_report_is_refused_at_create_time(
    personas: Any,
    rows: str,  # noqa: F811
    client: Client,
    policy: dict[str, Any],
    config: dict[str, Any],
    words: str,
) -> None:
    token = ApiToken.issue(personas["alice"], "t")[1]
    refused = create(client, token, rows, policy, **config)
    assert refused.status_code == 422
    assert (
        refused.json()["field"] == "checkpoint_policy.keep_best_metric" and words in refused.json()["error"]
    )
    assert not Experiment.objects.filter(name="kept").exists()


def test_keeping_the_best_by_a_metric_is_refused_on_verl_whose_checkpoints_carry_none() -> None:
    verl = RunConfig.from_preset("grpo").model_copy(update={"backend": "verl"})  # only its backend matters
    (problem,) = KeepPolicy(keep_best_metric=REWARD_MEAN).problems(verl)
    assert problem[0] == "keep_best_metric" and "without their metrics" in problem[1]
    assert KeepPolicy(keep_last=2).problems(verl) == []


def test_an_sft_experiments_policy_may_keep_the_best_by_its_loss_only(personas: Any, demos: str) -> None:  # noqa: F811
    from webapp.experiments.acceptance import accept

    sft = accept(personas["acme"], fields(demos, **{"sft.enabled": True}))
    assert KeepPolicy(keep_best_metric="sft/loss", keep_best_mode="min").problems(sft) == []
    assert KeepPolicy(keep_best_metric=REWARD_MEAN).problems(sft)[0][0] == "keep_best_metric"
    lowest = KeepPolicy(keep_best_metric="sft/loss", keep_best_mode="min", keep_best_count=2)
    losses = [
        (1, {"sft/loss": 0.5}),
        (2, {"sft/loss": 0.1}),
        (3, {}),
        (4, {"sft/loss": 0.3}),
        (5, {"sft/loss": 0.9}),
    ]
    assert lowest.kept(losses) == {2, 4, 5}  # the two lowest, and the newest


@pytest.fixture
def catalogue(personas: Any, rows: str) -> dict[str, Any]:  # noqa: F811
    """Acme: a run with five checkpoints (one deleted by the trainer, one evaluated, one tagged);
    Other: a run with one checkpoint Acme must never see."""
    acme, other = personas["acme"], personas["other"]
    experiment = Experiment.objects.create(team=acme, name="registry exp", task="arithmetic", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=acme, name="listed run", status=RunStatus.SUCCEEDED,
                             config={"data": {"train_path": rows}})  # fmt: skip
    files = {"policy/model.safetensors": b"x" * 100}
    checkpoints = {step: saved_checkpoint(run, step, {**files, "pad": b"p" * step}) for step in range(1, 6)}
    Checkpoint.objects.filter(pk=checkpoints[1].pk).update(deleted=True, deleted_by=TRAINER_DELETED)
    checkpoints[3].change_tags(add="best")
    evaluation = Run.objects.create(
        experiment=experiment, team=acme, name="eval", kind=RunKind.EVALUATION, status=RunStatus.SUCCEEDED,
        evaluated_run=run, evaluated_step=3, config={"data": {"val_path": rows}},
    )  # fmt: skip
    from webapp.ingestion import metrics_store

    metrics_store.write_points(evaluation.pk, "e1", [{"key": EVAL_ACC, "value": 0.75, "step": 0, "ts": 1.0}])
    theirs_exp = Experiment.objects.create(team=other, name="secret exp", task="arithmetic", preset="grpo")
    theirs = Run.objects.create(experiment=theirs_exp, team=other, name="secret run", config={})
    saved_checkpoint(theirs, 7, files)
    return {"run": run, "checkpoints": checkpoints}


def test_the_registry_lists_the_teams_checkpoints_filtered_sorted_and_paged_with_their_scores(
    personas: Any, catalogue: dict[str, Any], client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.force_login(personas["alice"])
    url = reverse("checkpoint_registry", args=["acme"])
    page = client.get(url).content.decode()
    assert page.count('id="checkpoint-') == 5 and "secret run" not in page
    assert "rows (dataset:" in page and "acc 0.75<" in page  # step 3's evaluation on its split
    assert "4 kept" in page and "1 deleted" in page and "by the trainer (trainer.keep_checkpoints)" in page
    # every kept row offers what the run page offers: the playground, evaluate, fork and export
    kept_row = page[page.index(f'id="checkpoint-{catalogue["checkpoints"][3].pk}"') :].split("</tr>")[0]
    for action in (
        'class="download"',
        'class="playground"',
        'class="evaluate"',
        'class="fork"',
        "Export</button>",
    ):
        assert action in kept_row, action
    tagged = client.get(url + "?tag=best").content.decode()
    assert (
        tagged.count('id="checkpoint-') == 1 and f'id="checkpoint-{catalogue["checkpoints"][3].pk}"' in tagged
    )
    deleted = client.get(url + "?state=deleted").content.decode()
    assert deleted.count('id="checkpoint-') == 1 and "Download" not in deleted
    by_size = client.get(url + "?sort=size").content.decode()
    order = [
        by_size.index(f'id="checkpoint-{catalogue["checkpoints"][step].pk}"') for step in (5, 4, 3, 2, 1)
    ]
    assert order == sorted(order)
    monkeypatch.setattr(checkpoint_registry, "PAGE_SIZE", 2)
    second = client.get(url + "?sort=step&page=2").content.decode()
    assert "page 2 of 3" in second and 'rel="prev"' in second and 'rel="next"' in second
    # htmx asks for the table alone
    partial = client.get(
        url + "?state=kept", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="registry"
    ).content.decode()
    assert partial.lstrip().startswith('<section id="registry">')
    client.force_login(personas["charlie"])
    theirs = client.get(reverse("checkpoint_registry", args=["other"])).content.decode()
    assert "secret run" in theirs and "listed run" not in theirs


def test_members_tag_and_untag_a_checkpoint_and_other_teams_cannot(
    personas: Any, catalogue: dict[str, Any], client: Client
) -> None:
    checkpoint = catalogue["checkpoints"][2]
    url = reverse("checkpoint_tags", args=["acme", checkpoint.pk])
    client.force_login(personas["bob"])
    answer = client.post(
        url, {"add": "candidate"}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"tags-{checkpoint.pk}"
    )
    assert answer.status_code == 200 and ">candidate<" in answer.content.decode()
    client.post(url, {"add": "best"})
    checkpoint.refresh_from_db()
    assert checkpoint.tags == ["candidate", "best"]
    client.post(url, {"remove": "candidate"})
    checkpoint.refresh_from_db()
    assert checkpoint.tags == ["best"]
    client.force_login(personas["charlie"])
    assert (
        client.post(reverse("checkpoint_tags", args=["acme", checkpoint.pk]), {"add": "x"}).status_code == 404
    )
    assert (
        client.post(reverse("checkpoint_tags", args=["other", checkpoint.pk]), {"add": "x"}).status_code
        == 404
    )
    checkpoint.refresh_from_db()
    assert checkpoint.tags == ["best"]
