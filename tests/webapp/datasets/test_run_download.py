"""GET /api/runs/<id>/dataset/<split>: the trainer fetches its data with the run's own token."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.webapp.datasets.conftest import contract_row, write_parquet
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run


def _dataset(team: Any, source: Path, *, validate: bool = True) -> Dataset:
    path = Path(shutil.copy(source, files.incoming_dir() / f"test-{source.name}"))
    dataset, _ = Dataset.from_file(team, path, sha256=files.sha256_of(path), name=source.stem, source="test")
    if validate:
        dataset.validate()
    return dataset


def _run(team: Any, data: dict[str, Any]) -> tuple[Run, str]:
    experiment = Experiment.objects.create(team=team, name=f"exp {Experiment.objects.count()}")
    run = Run.objects.create(experiment=experiment, team=team, config={"data": data})
    return run, run.issue_token()


def _get(run_id: int, split: str, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client().get(f"/api/runs/{run_id}/dataset/{split}", headers=headers)


def test_the_runs_train_and_val_files_are_served_to_its_token(
    personas: dict[str, Any], good_parquet: Path, tmp_path: Path
) -> None:
    train = _dataset(personas["acme"], good_parquet)
    val_file = write_parquet(tmp_path / "val.parquet", [contract_row(i) for i in range(3)])
    val = _dataset(personas["acme"], val_file)
    run, token = _run(personas["acme"], {"train_path": train.reference, "val_path": val.reference})
    response = _get(run.pk, "train", token)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    assert b"".join(response.streaming_content) == good_parquet.read_bytes()
    assert b"".join(_get(run.pk, "val", token).streaming_content) == val_file.read_bytes()


def test_a_run_without_a_val_split_answers_404(personas: dict[str, Any], good_parquet: Path) -> None:
    train = _dataset(personas["acme"], good_parquet)
    run, token = _run(personas["acme"], {"train_path": train.reference, "val_path": None})
    assert _get(run.pk, "val", token).status_code == 404
    assert _get(run.pk, "test", token).status_code == 404


@pytest.mark.parametrize("token", [None, "r1_not-a-real-token"])
def test_no_or_a_wrong_token_is_401(personas: dict[str, Any], good_parquet: Path, token: str | None) -> None:
    train = _dataset(personas["acme"], good_parquet)
    run, _ = _run(personas["acme"], {"train_path": train.reference})
    assert _get(run.pk, "train", token).status_code == 401


def test_a_token_opens_its_own_run_only(personas: dict[str, Any], good_parquet: Path) -> None:
    train = _dataset(personas["acme"], good_parquet)
    run, _ = _run(personas["acme"], {"train_path": train.reference})
    _, other_token = _run(personas["acme"], {"train_path": train.reference})
    assert _get(run.pk, "train", other_token).status_code == 404


def test_a_dataset_of_another_team_or_not_valid_is_refused(
    personas: dict[str, Any], good_parquet: Path, bad_role_parquet: Path
) -> None:
    theirs = _dataset(personas["other"], good_parquet)
    run, token = _run(personas["acme"], {"train_path": theirs.reference})
    assert _get(run.pk, "train", token).status_code == 409
    pending = _dataset(personas["acme"], bad_role_parquet, validate=False)
    run, token = _run(personas["acme"], {"train_path": pending.reference})
    assert _get(run.pk, "train", token).status_code == 409
    pending.validate()
    assert _get(run.pk, "train", token).status_code == 409  # invalid now


@pytest.mark.django_db(transaction=True)
def test_the_trainers_own_client_downloads_the_runs_dataset(
    personas: dict[str, Any], good_parquet: Path, live_server: Any, tmp_path: Path
) -> None:
    from trainer.report.client import RunApiClient
    from trainer.report.retry import RetryPolicy

    train = _dataset(personas["acme"], good_parquet)
    run, token = _run(personas["acme"], {"train_path": train.reference, "val_path": None})
    with RunApiClient(live_server.url, run.pk, token, retry=RetryPolicy(give_up_after_s=0)) as client:
        downloaded = client.download_dataset("train", tmp_path / "work")
        assert client.download_dataset("val", tmp_path / "work") is None
    assert downloaded is not None and downloaded.read_bytes() == good_parquet.read_bytes()
