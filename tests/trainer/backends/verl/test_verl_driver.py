"""The verl run's driver on CPU: staging, the checkpoint callback and stop handling, with verl simulated."""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.backends.verl import driver
from trainer.backends.verl.driver import CheckpointWatcher
from trainer.config import RunConfig
from trainer.contract import MLFLOW_TRACKING_URI_ENV
from trainer.report.reporters import MemoryReporter


def save(checkpoint_dir: Path, step: int) -> None:
    """What verl's trainer leaves after a completed save."""
    (checkpoint_dir / f"global_step_{step}" / "actor").mkdir(parents=True)
    (checkpoint_dir / "latest_checkpointed_iteration.txt").write_text(str(step))


def test_each_completed_save_is_registered_once(tmp_path: Path) -> None:
    reporter = MemoryReporter()
    watcher = CheckpointWatcher(tmp_path, reporter)
    assert watcher.poll() is None  # nothing saved yet
    save(tmp_path, 2)
    assert watcher.poll() == 2
    assert watcher.poll() is None
    save(tmp_path, 4)
    assert watcher.poll() == 4
    assert reporter.checkpoints == [
        (2, str(tmp_path / "global_step_2"), {}),
        (4, str(tmp_path / "global_step_4"), {}),
    ]


def test_a_half_written_marker_is_ignored_until_it_is_whole(tmp_path: Path) -> None:
    reporter = MemoryReporter()
    watcher = CheckpointWatcher(tmp_path, reporter)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("")
    assert watcher.poll() is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert watcher.poll() is None  # the folder is not there
    assert reporter.checkpoints == []


@pytest.fixture
def run_config(tmp_path: Path, rows_file: Any) -> RunConfig:
    train = rows_file("train.parquet", 4, "contains", ground_truth="4")
    return RunConfig.from_preset(
        "grpo",
        backend="verl",
        executor="ray",
        **{
            "model.path": "/models/m",
            "data.train_path": str(train),
            "resources.gpus_per_node": 1,
            "trainer.batch_size": 1,
            "optim.mini_batch_size": 8,
            "trainer.checkpoint_dir": str(tmp_path / "shared" / "runs" / "9" / "checkpoints"),
        },
    )


def fake_verl(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    monkeypatch.setattr(driver, "POLL_S", 0.05)
    monkeypatch.setattr(
        driver,
        "verl_command",
        lambda config, paths: [sys.executable, "-c", textwrap.dedent(script), paths.checkpoint_dir],
    )


def test_it_stages_the_data_and_the_agent_loop_files_on_shared_storage(
    run_config: RunConfig, tmp_path: Path
) -> None:
    paths, config_file = driver.stage(run_config)
    shared = tmp_path / "shared" / "runs" / "9"
    assert paths.train_files == str(shared / "data" / "train.parquet")
    assert Path(paths.train_files).read_bytes() == Path(run_config.data.train_path).read_bytes()
    assert paths.checkpoint_dir == str(shared / "checkpoints")
    assert RunConfig.from_json(config_file.read_text()).data.train_path == paths.train_files
    entries = yaml.safe_load(Path(paths.agent_loop_config).read_text())
    assert {entry["run_config_path"] for entry in entries} == {str(config_file)}


@pytest.mark.parametrize(
    ("console", "tracking", "logger"), [(True, "", "[console]"), (False, "http://web/mlflow", "[mlflow]")]
)
def test_verls_loggers_follow_report_console_and_the_tracking_server(
    run_config: RunConfig, monkeypatch: pytest.MonkeyPatch, console: bool, tracking: str, logger: str
) -> None:
    monkeypatch.setenv(MLFLOW_TRACKING_URI_ENV, tracking)
    paths, _ = driver.stage(run_config)
    argv = driver.verl_command(run_config.with_overrides(**{"report.console": console}), paths)
    assert f"trainer.logger={logger}" in argv


def test_it_runs_verl_registers_its_checkpoints_and_sends_no_heartbeats(
    run_config: RunConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_verl(
        monkeypatch,
        """
        import pathlib, sys, time
        root = pathlib.Path(sys.argv[1])
        for step in (1, 2):
            print(f"step:{step} - critic/score/mean:0.5", flush=True)
            (root / f"global_step_{step}").mkdir(parents=True)
            (root / "latest_checkpointed_iteration.txt").write_text(str(step))
            time.sleep(0.3)
        """,
    )
    reporter = MemoryReporter()
    with caplog.at_level("INFO", logger="trainer.verl"):
        result = driver.train(run_config, reporter)
    assert result.status == "succeeded" and result.last_checkpoint_step == 2
    assert [step for step, _, _ in reporter.checkpoints] == [1, 2]
    assert reporter.heartbeats == [] and reporter.statuses == []
    assert "step:2 - critic/score/mean:0.5" in caplog.text


def test_a_failing_verl_fails_the_run(run_config: RunConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_verl(monkeypatch, "import sys; print('boom'); sys.exit(3)")
    with pytest.raises(RuntimeError, match="exited with code 3"):
        driver.train(run_config, MemoryReporter())


def test_a_stop_request_reaches_verl_as_sigterm(
    run_config: RunConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_verl(
        monkeypatch,
        """
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), sys.exit(0)))
        print("waiting", flush=True)
        time.sleep(60)
        """,
    )
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    result = driver.train(run_config, MemoryReporter(), stop_event=stop)
    assert result.status == "cancelled" and result.returncode == 0


def test_the_cli_dispatches_a_verl_run_to_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.backends import BACKENDS
    from trainer.cli import run_training

    seen: list[RunConfig] = []

    def fake_driver(config: RunConfig, reporter: Any, *, stop_event: threading.Event | None = None) -> Any:
        seen.append(config)
        return driver.VerlResult("succeeded", None, 0)

    monkeypatch.setattr(driver, "train", fake_driver)
    config = RunConfig.from_preset(
        "grpo", backend="verl", **{"resources.gpus_per_node": 1, "optim.mini_batch_size": 8}
    )
    assert BACKENDS.get("verl").name == "verl"
    assert run_training(config, MemoryReporter()) == 0
    assert seen == [config]
