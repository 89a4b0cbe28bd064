"""The SDK without a server: `import studio` as pyproject installs it, a run logged offline to its
folder in the trainer's spool format, and metric batches written without pydantic that read back as
the wire model (docs/sdk.md)."""

from __future__ import annotations

import gzip
import importlib
import math
import sys
import tomllib
from pathlib import Path

import pytest
from setuptools import find_packages

from trainer.contract import MetricBatch, TrajectoryBatch
from trainer.report.spool import metric_batch_json, spool_files
from trainer.studio import sdk
from trainer.studio.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_installs_the_sdk_as_the_top_level_studio_package(monkeypatch: pytest.MonkeyPatch) -> None:
    finder = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    (where,) = [folder for folder in finder["where"] if folder != "."]
    assert find_packages(where=str(ROOT / where), include=finder["include"]) == ["studio"]
    monkeypatch.syspath_prepend(str(ROOT / where))
    monkeypatch.delitem(sys.modules, "studio", raising=False)
    studio = importlib.import_module("studio")
    assert studio.init is sdk.init and studio.log is sdk.log and studio.run is None


def test_metric_batches_written_directly_read_back_as_the_wire_model() -> None:
    points = [
        ("loss", 0, 0.1, 1.7e9),
        ('naïve "key"', 3, math.nan, 1.7e9),
        ("x", 4, -math.inf, 1.5),
        ("x", 5, 1e-300, 2.0),
    ]
    batch = MetricBatch.model_validate_json(metric_batch_json("ab12", points, {}))
    assert batch.batch_id == "ab12"
    read = [(p.key, p.step, p.value, p.ts) for p in batch.points]
    assert read[0] == points[0] and read[2:] == points[2:]
    assert read[1][0] == 'naïve "key"' and math.isnan(read[1][2])


def test_an_offline_run_is_kept_in_its_folder_in_the_spool_format(tmp_path: Path) -> None:
    run = sdk.init(project="p", name="offline", config={"lr": 0.1}, id="off-1", dir=tmp_path, mode="offline")
    assert run.offline and run.url is None
    for step in range(5):
        run.log({"loss": 1.0 / (step + 1), "note": "text is left out"})
    run.log({"acc": 0.5}, step=10)
    run.log_trajectory("2+2?", ["4"], reward=1.0)
    with pytest.raises(ValueError, match="wrong: Extra inputs are not permitted"):
        run.log_trajectory("2+2?", [{"response": "4", "tool_calls": [{"name": "calc", "wrong": 1}]}])
    run.summary["best"] = 2
    run.finish(quiet=True)

    folder = RunFolder(tmp_path / "run-off-1")
    record = folder.read()
    assert (
        record.finished
        and not record.synced
        and record.summary == {"best": 2}
        and record.config == {"lr": 0.1}
    )
    kinds = [path.name.split(".")[1] for path in spool_files(folder.spool)]
    assert kinds == ["metrics", "trajectories", "status"]
    metrics = MetricBatch.model_validate_json(gzip.decompress(spool_files(folder.spool)[0].read_bytes()))
    assert [(p.key, p.step) for p in metrics.points][-2:] == [("loss", 4), ("acc", 10)]
    trajectories = TrajectoryBatch.model_validate_json(
        gzip.decompress(spool_files(folder.spool)[1].read_bytes())
    )
    assert trajectories.training_step == 10 and trajectories.trajectories[0].total_reward == 1.0
