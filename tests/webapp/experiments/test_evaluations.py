"""Evaluation runs (docs/evaluations.md) and checkpoint downloads: what is refused before anything
is made, the zip a user downloads, and, through the real worker and trainer, an evaluation of a saved
checkpoint beside one of the base model, whose reported metrics are those of its stored trajectories."""

from __future__ import annotations

import io
import statistics
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.experiments.test_launching import launch, settled, tiny_config
from tests.webapp.polling import poll_until
from tests.webapp.trainer_posts import Trainer
from tests.webapp.trainer_posts import trajectory as sample
from trainer.config import RunConfig
from trainer.contract import (
    EVAL_ACC,
    EVAL_K,
    EVAL_PASS_AT_1,
    EVAL_PASS_AT_K,
    EVAL_PROMPTS,
    EVAL_REWARD_MEAN,
    HEARTBEAT_PATH,
)
from trainer.evaluation import evaluation_metrics
from webapp.accounts.models import ApiToken, Role
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments import run_files, services
from webapp.experiments.evaluations import EvaluationRefused, EvaluationSettings, create_evaluation
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.ingestion.metrics_store import latest_values
from webapp.ingestion.models import Checkpoint, Trajectory
from webapp.results.eval_table import evaluation_table


def saved_checkpoint(run: Run, step: int, files: dict[str, bytes]) -> Checkpoint:
    """A checkpoint folder the way the trainer leaves one, inside the run's own checkpoint folder."""
    folder = Path(run_files.checkpoint_dir(run)) / f"step_{step:08d}"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return Checkpoint.objects.create(
        run=run, step=step, path=str(folder), size_bytes=sum(map(len, files.values()))
    )


@pytest.fixture
def split(personas: Any, tmp_path: Path) -> str:
    """A usable dataset of Acme, as a config names it (cheaper than a recipe's)."""
    incoming = write_parquet(files.incoming_dir() / "eval.parquet", [contract_row(i) for i in range(4)])
    dataset, _ = Dataset.from_file(personas["acme"], incoming, sha256=files.sha256_of(incoming), name="rows",
                                   source="t", validate_later=False)  # fmt: skip
    dataset.validate()
    return dataset.reference


@pytest.fixture
def trained(personas: Any, split: str) -> Run:
    config = RunConfig.from_preset(
        "grpo", **{"name": "exp", "task": "arithmetic", "model.path": "tiny-test", "data.train_path": split}
    )
    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    return Run.objects.create(
        experiment=experiment, team=experiment.team, status=RunStatus.SUCCEEDED, name="r"
    )


FILES = {"policy/config.json": b'{"a": 1}', "policy/model.safetensors": bytes(range(256)) * 5000,
         "trainer_state.json": b'{"step": 3}'}  # fmt: skip


def test_a_checkpoint_downloads_as_a_zip_of_its_files_for_whoever_reads_the_run(
    personas: Any, trained: Run
) -> None:
    checkpoint = saved_checkpoint(trained, 3, FILES)
    personas["acme"].add_member(personas["charlie"], Role.VIEWER)
    client = Client()
    client.force_login(personas["charlie"])  # a viewer: run data is theirs to read
    response: Any = client.get(f"/t/{personas['acme'].slug}/runs/{trained.pk}/checkpoints/3/download/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert "private" in response["Cache-Control"]
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert {name: archive.read(name) for name in archive.namelist()} == {
        f"step_00000003/{name}": data for name, data in FILES.items()
    }
    token = ApiToken.issue(personas["charlie"], "t")[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    listed = api.get(f"/api/t/{personas['acme'].slug}/runs/{trained.pk}/checkpoints").json()
    assert [(c["step"], c["deleted"]) for c in listed] == [(3, False)]
    via_api: Any = api.get(listed[0]["download"])
    again: Any = client.get(f"/t/{personas['acme'].slug}/runs/{trained.pk}/checkpoints/3/download/")
    assert b"".join(via_api.streaming_content) == b"".join(again.streaming_content)
    Checkpoint.objects.filter(pk=checkpoint.pk).update(deleted=True)
    assert (
        client.get(f"/t/{personas['acme'].slug}/runs/{trained.pk}/checkpoints/3/download/").status_code == 404
    )
    assert api.get(listed[0]["download"]).status_code == 409


def test_a_checkpoint_path_outside_its_runs_folder_is_never_served(
    personas: Any, trained: Run, tmp_path: Path
) -> None:
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("x")
    Checkpoint.objects.create(run=trained, step=5, path=str(tmp_path / "secret"))
    client = Client()
    client.force_login(personas["alice"])
    assert (
        client.get(f"/t/{personas['acme'].slug}/runs/{trained.pk}/checkpoints/5/download/").status_code == 404
    )


def test_what_cannot_run_is_refused_before_any_evaluation_is_made(
    personas: Any, trained: Run, split: str
) -> None:
    experiment = trained.experiment
    deleted = saved_checkpoint(trained, 1, FILES)
    Checkpoint.objects.filter(pk=deleted.pk).update(deleted=True)
    gone = Checkpoint.objects.create(
        run=trained, step=2, path=str(Path(deleted.path).with_name("step_00000002"))
    )
    cases = {
        "deleted": (EvaluationSettings(split), trained, deleted.step, "was deleted"),
        "no files": (EvaluationSettings(split), trained, gone.step, "no weights on disk"),
        "no such step": (EvaluationSettings(split), trained, 99, "no checkpoint of step 99"),
        "no split": (EvaluationSettings("dataset:999999"), None, None, "not a valid dataset of this team"),
    }
    for name, (settings, source, step, message) in cases.items():
        with pytest.raises(EvaluationRefused, match=message):
            create_evaluation(experiment, personas["alice"], settings, source=source, step=step)
        assert not Run.objects.filter(kind=RunKind.EVALUATION).exists(), name
    client = Client()
    client.force_login(personas["alice"])
    response = client.post(
        f"/t/{personas['acme'].slug}/experiments/{experiment.pk}/evaluate/?run={trained.pk}&step=1",
        {"dataset": split, "k": 2, "max_rows": 3, "temperature": 1.0, "run": trained.pk, "step": 1},
    )
    assert response.status_code == 400 and b"was deleted" in response.content
    token = ApiToken.issue(personas["alice"], "t")[1]
    refused = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        f"/api/t/{personas['acme'].slug}/evaluations",
        {"experiment": experiment.pk, "run": trained.pk, "step": 1, "k": 2},
        content_type="application/json",
    )
    assert refused.status_code == 422 and refused.json()["field"] == "step"
    assert not Run.objects.filter(kind=RunKind.EVALUATION).exists()


@pytest.mark.slow
def test_an_evaluation_of_a_saved_checkpoint_reports_what_its_stored_trajectories_give(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any
) -> None:
    start_worker()
    training = launch(personas, tiny_config(arithmetic, steps=1))
    poll_until(lambda: settled(training), every_s=0.5)
    assert training.status == RunStatus.SUCCEEDED, training.message
    checkpoint = Checkpoint.objects.get(run=training)
    split = f"dataset:{arithmetic['train'].pk}"
    settings = EvaluationSettings(split, k=2, max_rows=3, temperature=1.0)
    token = ApiToken.issue(personas["alice"], "t")[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    made = api.post(
        f"/api/t/{personas['acme'].slug}/evaluations",
        {"experiment": training.experiment_id, "run": training.pk, "step": checkpoint.step, "dataset": split,
         "k": 2, "max_rows": 3},
        content_type="application/json",
    )  # fmt: skip
    assert made.status_code == 201, made.content
    evaluation = Run.objects.get(pk=made.json()["id"])
    base = create_evaluation(training.experiment, personas["alice"], settings)
    poll_until(lambda: settled(evaluation) and settled(base), every_s=0.5)
    for run in (evaluation, base):
        run.refresh_from_db()
        assert run.status == RunStatus.SUCCEEDED, run.message
    assert (
        evaluation.config["evaluation"]["checkpoint"] == checkpoint.path
        and base.config["evaluation"]["checkpoint"] is None
    )

    stored = list(Trajectory.objects.filter(run=evaluation))
    assert len(stored) == 3 * 2  # rows x k
    reported = {key: value for key, (_step, value) in latest_values(evaluation.pk).items()}
    assert reported[EVAL_ACC] == pytest.approx(statistics.fmean(t.metrics["acc"] for t in stored))
    groups: dict[str, list[bool]] = {}
    for trajectory in stored:
        groups.setdefault(trajectory.group_id, []).append(trajectory.success)
    assert reported[EVAL_PROMPTS] == len(groups) == 3
    assert reported[EVAL_PASS_AT_1] == pytest.approx(
        statistics.fmean(sum(g) / len(g) for g in groups.values())
    )
    assert reported[EVAL_PASS_AT_K] == pytest.approx(statistics.fmean(float(any(g)) for g in groups.values()))
    assert reported[EVAL_REWARD_MEAN] == pytest.approx(statistics.fmean(t.total_reward for t in stored))
    recomputed = evaluation_metrics(
        [(t.group_id, t.metrics["acc"]) for t in stored], [t.total_reward for t in stored], 2
    )
    assert {key: reported[key] for key in recomputed} == pytest.approx(recomputed)

    table = evaluation_table(training.experiment)
    assert table.columns == ["base model", f"{training.name} · step {checkpoint.step}"]
    assert [[cell.run.pk if cell else None for cell in row.cells] for row in table.rows] == [
        [base.pk, evaluation.pk]
    ]
    got = api.get(f"/api/t/{personas['acme'].slug}/evaluations/{evaluation.pk}").json()
    assert got["metrics"][EVAL_ACC] == reported[EVAL_ACC] and got["settings"]["k"] == 2
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(f"/t/{personas['acme'].slug}/runs/{evaluation.pk}/").content.decode()
    assert 'id="evaluation-acc"' in page and f"checkpoint of step {checkpoint.step}" in page
    rollouts = client.get(f"/t/{personas['acme'].slug}/runs/{evaluation.pk}/rollouts/")
    assert rollouts.status_code == 200


def killed_evaluation(experiment: Experiment, client: Client) -> Run:
    """An evaluation of k = 2 whose trainer stored 2 of its 13 batches, then was killed (SIGKILL)."""
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, kind=RunKind.EVALUATION,
                             name="eval · base model", config={"name": "e", "seed": 1, "rollout": {"n": 2}})  # fmt: skip
    trainer = Trainer(client, run.pk, str(run.issue_token()))
    accs = {"p0s0": 1.0, "p0s1": 0.0, "p1s0": 0.0, "p1s1": 0.0}
    for step, group in ((1, "p0"), (2, "p1")):
        sent = [sample(f"{group}s{i}", group, accs[f"{group}s{i}"], metrics={"acc": accs[f"{group}s{i}"]})
                for i in range(2)]  # fmt: skip
        assert trainer.trajectories(step, sent, batch_id=f"t{step}").status_code == 200
        assert trainer.post(HEARTBEAT_PATH, {"step": step, "total_steps": 13, "ts": 1.7e9}).status_code == 200
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    process.kill()
    process.wait()
    run.record_executor_ref(f"pgid:{process.pid}")
    services.reconcile(Run.objects.get(pk=run.pk))  # the reaper finds it gone
    run.refresh_from_db()
    return run


def test_a_killed_evaluation_keeps_and_shows_what_its_stored_batches_scored(
    personas: Any, experiment: Experiment, client: Client
) -> None:
    run = killed_evaluation(experiment, client)

    assert run.status == RunStatus.FAILED
    assert "evaluation process" in run.message and "training" not in run.message, run.message
    scored = {key: value for key, (_step, value) in latest_values(run.pk).items()}
    assert scored == pytest.approx(
        {EVAL_ACC: 0.25, EVAL_PASS_AT_1: 0.25, EVAL_PASS_AT_K: 0.5, EVAL_REWARD_MEAN: 0.25}
        | {EVAL_PROMPTS: 2, EVAL_K: 2}
    )
    (row,) = evaluation_table(experiment).rows
    assert [(cell.acc, cell.partial) for cell in row.cells if cell] == [(0.25, True)]
    client.force_login(personas["alice"])
    page = client.get(f"/t/{personas['acme'].slug}/runs/{run.pk}/").content.decode()
    assert 'id="evaluation-partial"' in page and "after 2 of 13 batches" in page
    assert 'id="evaluation-acc"' in page


@pytest.mark.browser
def test_a_killed_evaluations_partial_scores_read_as_partial_in_the_browser(
    personas: Any, experiment: Experiment, client: Client, login: Any, live_server: Any
) -> None:
    run = killed_evaluation(experiment, client)
    page = login("alice")
    shots = Path(__file__).resolve().parents[3] / "var" / "shots" / "a35sup"
    shots.mkdir(parents=True, exist_ok=True)
    slug = personas["acme"].slug
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/t/{slug}/runs/{run.pk}/")
        partial = page.locator("#evaluation-partial")
        assert partial.is_visible() and "partial" in partial.inner_text()
        assert page.locator("#evaluation-acc").inner_text().strip() != ""
        page.screenshot(path=str(shots / f"evaluation-partial-{width}.png"), full_page=True)
        page.goto(f"{live_server.url}/t/{slug}/experiments/{experiment.pk}/")
        assert page.locator("#evaluations .partial").is_visible()
        page.screenshot(path=str(shots / f"evaluations-table-partial-{width}.png"), full_page=True)
