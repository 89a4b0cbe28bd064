"""`studio import tensorboard` and `studio import mlflow` against a live server (docs/importers.md):
a log directory written by torch's SummaryWriter and an experiment on MLflow's own server import
completely (every scalar point, param and tag counted on both sides), a second import stores
nothing twice, and an import that stopped half-way is completed in the same run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench._common import ensure_mlflow
from trainer.contract import IMPORT_SOURCE_TAG, INT4_MAX
from trainer.studio.cli import main
from trainer.studio.client import Settings
from trainer.studio.import_target import ImportTarget
from webapp.accounts.models import ApiToken
from webapp.experiments.artifacts import artifact_root
from webapp.experiments.models import Run
from webapp.ingestion import metrics_store

pytestmark = pytest.mark.slow

STEPS = 60


def our_points(run: Run) -> dict[str, list[tuple[int, float]]]:
    keys = metrics_store.latest_values(run.pk)
    return {key: [(s, v) for s, v, _ in metrics_store.raw_points(run.pk, key, 0, INT4_MAX)] for key in keys}


def by_source(prefix: str) -> dict[str, Run]:
    runs = Run.objects.filter(logged__key=IMPORT_SOURCE_TAG, logged__value__startswith=prefix)
    return {run.logged.tags().get(key=IMPORT_SOURCE_TAG).value: run for run in runs}


@pytest.fixture
def studio(
    live_server: Any, personas: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    token = ApiToken.issue(personas["bob"], "importer")[1]
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "none.json"))
    for name, value in (("STUDIO_URL", live_server.url), ("STUDIO_TEAM", "acme"), ("STUDIO_TOKEN", token)):
        monkeypatch.setenv(name, value)

    def invoke(*args: str) -> dict[str, Any]:
        result = CliRunner().invoke(main, ["--json", *args], catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output, result.stderr)
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    return invoke


def write_tensorboard(logdir: Path) -> None:
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for step in range(STEPS):
        writer.add_scalar("loss/train", 1.0 / (step + 1), step)
        writer.add_scalar("reward/custom", step * 0.1, step * 2)
    for step in range(3):
        writer.add_histogram("weights", np.arange(10.0) * step, step)
    writer.add_text("notes", "first **note**", 0)
    writer.add_hparams({"lr": 0.01, "optimizer": "adam", "batch": 32}, {"hp/accuracy": 0.9})
    writer.close()


def test_a_tensorboard_log_directory_imports_completely_and_once(studio: Any, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_tensorboard(tmp_path / "logs")
    first = studio("import", "tensorboard", str(tmp_path / "logs"))
    assert len(first["runs"]) == 2 and not any(run["skipped"] for run in first["runs"])

    imported = by_source("tensorboard:")
    assert len(imported) == 2
    for source, run in imported.items():
        theirs = EventAccumulator(source.removeprefix("tensorboard:"), size_guidance={"scalars": 0})
        theirs.Reload()
        expected = {t: [(e.step, e.value) for e in theirs.Scalars(t)] for t in theirs.Tags()["scalars"]}
        ours = our_points(run)
        assert {k: len(v) for k, v in ours.items()} == {k: len(v) for k, v in expected.items()}
        assert ours == {k: [(s, pytest.approx(v)) for s, v in points] for k, points in expected.items()}
        assert run.is_external and run.status == "succeeded"
    main_run = next(run for run in imported.values() if "loss/train" in our_points(run))
    hparams_run = next(run for run in imported.values() if run is not main_run)
    assert dict(hparams_run.logged.params().values_list("key", "value")) == {
        "lr": "0.01",
        "optimizer": "adam",
        "batch": "32",
    }
    files = artifact_root(main_run)
    assert (files / "tensorboard/text/notes/text_summary.jsonl").read_text().count("first **note**") == 1
    assert len((files / "tensorboard/histograms/weights.jsonl").read_text().splitlines()) == 3

    again = studio("import", "tensorboard", str(tmp_path / "logs"))
    assert all(run["skipped"] for run in again["runs"])
    assert Run.objects.count() == 2 and by_source("tensorboard:").keys() == imported.keys()


MLFLOW_SCRIPT = """
import time
import mlflow
from mlflow.entities import Metric
mlflow.set_experiment("from mlflow")
for index in range(2):
    with mlflow.start_run(run_name=f"mlflow run {index}") as run:
        mlflow.log_params({"lr": 0.001 * (index + 1), "layers": 4, "optimizer": "adam"})
        mlflow.set_tags({"team": "nlp", "seed": str(index)})
        now = int(time.time() * 1000)
        loss = [Metric("loss", 1.0 / (step + 1) + index, now + step, step) for step in range(%(steps)d)]
        acc = [Metric("val/acc", step / 100, now + step, step) for step in range(0, %(steps)d, 3)]
        mlflow.MlflowClient().log_batch(run.info.run_id, metrics=loss + acc)
        mlflow.log_text("hello from run %%d" %% index, "notes/hello.txt")
"""


def test_an_mlflow_experiment_imports_completely_and_a_stopped_import_resumes(
    studio: Any, mlflow_server: str, live_server: Any
) -> None:
    import httpx

    python = ensure_mlflow().parent / "python"
    env = {"MLFLOW_TRACKING_URI": mlflow_server, "PATH": "/usr/bin:/bin"}
    subprocess.run([str(python), "-c", MLFLOW_SCRIPT % {"steps": STEPS}], env=env, check=True, timeout=300)
    api = httpx.Client(base_url=mlflow_server + "/api/2.0/mlflow/")
    experiment = api.get("experiments/get-by-name", params={"experiment_name": "from mlflow"}).json()
    theirs = api.post(
        "runs/search", json={"experiment_ids": [experiment["experiment"]["experiment_id"]]}
    ).json()
    # An import that stopped half-way: its run made, the first hundred points of one run stored.
    target = ImportTarget(Settings.load())
    first = theirs["runs"][0]
    ours_id = target.experiment_id("from mlflow")
    half = target.call(
        "POST",
        "runs/create",
        {
            "experiment_id": ours_id,
            "run_name": "half",
            "tags": [
                {"key": IMPORT_SOURCE_TAG, "value": f"mlflow:{mlflow_server}/{first['info']['run_id']}"}
            ],
        },
    )["run"]["info"]
    target.call(
        "POST",
        "runs/log-batch",
        {"run_id": half["run_id"], "metrics": [{"key": "loss", "value": 7.0, "timestamp": 1, "step": 0}]},
    )

    done = studio("import", "mlflow", "--tracking-uri", mlflow_server, "--experiment", "from mlflow")
    assert [run["skipped"] for run in done["runs"]] == [False, False]
    imported = by_source(f"mlflow:{mlflow_server}/")
    assert (
        len(imported) == 2
        and imported[f"mlflow:{mlflow_server}/{first['info']['run_id']}"].mlflow_run_id == half["run_id"]
    )
    for run in theirs["runs"]:
        ours = imported[f"mlflow:{mlflow_server}/{run['info']['run_id']}"]
        params = {p["key"]: p["value"] for p in run["data"]["params"]}
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        assert ours.name == tags.pop("mlflow.runName")  # the run's name here, not a tag
        assert dict(ours.logged.params().values_list("key", "value")) == params
        assert {k: v for k, v in ours.logged.tags().values_list("key", "value") if k in tags} == tags
        points = our_points(ours)
        for key in ("loss", "val/acc"):
            history = api.get(
                "metrics/get-history", params={"run_id": run["info"]["run_id"], "metric_key": key}
            )
            expected = sorted((m["step"], m["value"]) for m in history.json()["metrics"])
            assert len(points[key]) == len(expected) == (STEPS if key == "loss" else STEPS // 3)
            if ours.mlflow_run_id != half["run_id"]:
                assert points[key] == [(s, pytest.approx(v)) for s, v in expected]
        assert (artifact_root(ours) / "notes/hello.txt").read_text().startswith("hello from run")
        assert ours.status == "succeeded"

    again = studio("import", "mlflow", "--tracking-uri", mlflow_server)
    assert again["runs"] and all(run["skipped"] for run in again["runs"])
    assert Run.objects.filter(experiment__name="from mlflow").count() == 2
