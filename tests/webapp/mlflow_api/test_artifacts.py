"""The official MLflow client's artifact calls against the live server: files logged, listed and read
back, stored in the run's own folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from webapp.experiments.artifacts import artifact_root
from webapp.experiments.models import Run


def test_log_artifact_dict_and_text_are_listed_and_read_back(
    tracking: Callable[[str], str], tokens: dict[str, str], tmp_path: Path
) -> None:
    import mlflow
    from mlflow import MlflowClient

    tracking(tokens["bob"])
    report = tmp_path / "report.md"
    report.write_text("# eval\n<script>alert(1)</script>\n")
    mlflow.set_experiment("with artifacts")
    with mlflow.start_run() as active:
        mlflow.log_artifact(str(report))
        mlflow.log_artifact(str(report), artifact_path="reports/day 1")
        mlflow.log_dict({"lr": 1e-5, "n": 4}, "config/run.json")
        mlflow.log_text("step 1 ok\n", "logs/train.txt")
    run_id = active.info.run_id

    client = MlflowClient()
    assert [f.path for f in client.list_artifacts(run_id)] == ["config", "logs", "report.md", "reports"]
    nested = client.list_artifacts(run_id, "reports/day 1")
    assert [(f.path, f.is_dir, f.file_size) for f in nested] == [
        ("reports/day 1/report.md", False, len(report.read_bytes()))
    ]
    assert mlflow.artifacts.load_dict(f"runs:/{run_id}/config/run.json") == {"lr": 1e-5, "n": 4}
    assert mlflow.artifacts.load_text(f"runs:/{run_id}/logs/train.txt") == "step 1 ok\n"
    copied = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="reports", dst_path=str(tmp_path / "out")
    )
    assert (Path(copied) / "day 1" / "report.md").read_text() == report.read_text()

    run = Run.objects.get(mlflow_run_id=run_id)
    assert (artifact_root(run) / "config" / "run.json").is_file()


def test_a_path_that_could_leave_the_runs_folder_is_refused_and_nothing_is_written(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    import mlflow
    from django.test import Client

    tracking(tokens["bob"])
    mlflow.set_experiment("hostile paths")
    active = mlflow.start_run()
    run = Run.objects.get(mlflow_run_id=active.info.run_id)
    root = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.mlflow_run_id}/artifacts"
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['bob']}")
    for path in ("../../escape.txt", "a/../../escape.txt", "./x", "nul\x00byte"):
        response = client.put(f"{root}/{path}", b"x", content_type="text/plain")
        assert (response.status_code, response.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), path
    other_experiment = run.experiment_id + 1000
    response = client.put(
        f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{other_experiment}/{run.mlflow_run_id}/artifacts/f",
        b"x",
        content_type="text/plain",
    )
    assert response.status_code == 404
    assert not artifact_root(run).exists() or not any(artifact_root(run).rglob("*"))
    assert not (artifact_root(run).parent.parent / "escape.txt").exists()


def test_an_ended_run_takes_no_more_artifacts(tracking: Callable[[str], str], tokens: dict[str, str]) -> None:
    """The finding: members could still PUT artifacts into finished runs."""
    import mlflow
    from django.test import Client

    tracking(tokens["bob"])
    with mlflow.start_run() as active:
        mlflow.log_text("kept\n", "notes.txt")
    run = Run.objects.get(mlflow_run_id=active.info.run_id)
    url = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{run.experiment_id}/{run.mlflow_run_id}/artifacts/notes.txt"
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['alice']}")  # an owner of the team
    response = client.put(url, b"replaced", content_type="text/plain")
    assert (response.status_code, response.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    assert (artifact_root(run) / "notes.txt").read_text() == "kept\n"
    assert client.get(url).status_code == 200  # still read back
