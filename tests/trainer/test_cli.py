"""The CLI: validate, presets, usage errors, exit codes and signal handling, a webapp run's fetch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from loopback import RUN_ID, TOKEN, LoopbackServer, Recorder

from trainer.algos.presets import PRESETS
from trainer.cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USAGE,
    load_config,
    main,
    run_training,
)
from trainer.config import RunConfig
from trainer.contract import StatusUpdate
from trainer.report.reporters import MemoryReporter, Reporter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "train.parquet"
    rows = [
        {
            "data_source": "arith",
            "prompt": [{"role": "user", "content": "What is 2+2?"}],
            "reward_model": {"style": "rule", "ground_truth": "4"},
            "extra_info": {"index": 0},
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_config(tmp_path: Path, dataset: Path, extra: str = "") -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(f"preset: grpo\nmodel:\n  path: /models/tiny\ndata:\n  train_path: {dataset}\n{extra}")
    return path


# -- validate -----------------------------------------------------------------------------------------


def test_validate_accepts_a_good_config(
    tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, dataset)

    assert main(["validate", str(config)]) == EXIT_OK
    assert "valid (preset grpo, estimator grpo, loss vanilla, kl loss)" in capsys.readouterr().out


def test_validate_prints_each_error_with_its_field_and_exits_2(
    tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, dataset, "rollout:\n  n: 1\ntrainer:\n  resume: true\n")

    assert main(["validate", str(config)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: rollout.n: rollout.n must be ≥ 2 for grpo: set rollout.n to 2 or more" in err
    assert "error: trainer.checkpoint_dir: trainer.resume needs a folder" in err


def test_validate_applies_set_overrides(tmp_path: Path, dataset: Path) -> None:
    config = write_config(tmp_path, dataset, "rollout:\n  n: 1\n")

    assert main(["validate", str(config), "--set", "rollout.n=2", "--set", "data.val_path=null"]) == EXIT_OK


def test_validate_rejects_an_unknown_field(
    tmp_path: Path, dataset: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, dataset)

    assert main(["validate", str(config), "--set", "rollout.temprature=0.5"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: rollout.temprature: 'rollout.temprature' is not a field of the config" in err
    assert "did you mean rollout.temperature?" in err


def test_validate_names_a_missing_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, tmp_path / "nope.parquet")

    assert main(["validate", str(config)]) == EXIT_USAGE
    assert "error: data.train_path:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("rollout: [unclosed\n", "not valid YAML"),
        ("- just\n- a list\n", "mapping of fields"),
        (
            "preset: stepppo\n",
            "unknown preset 'stepppo'; choose one of: gigpo, grpo, ppo, reinforce, rloo, steppo",
        ),
    ],
)
def test_validate_explains_a_file_it_cannot_use(
    tmp_path: Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)

    assert main(["validate", str(config)]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_validate_rejects_a_set_without_a_value(tmp_path: Path, dataset: Path) -> None:
    assert main(["validate", str(write_config(tmp_path, dataset)), "--set", "rollout.n"]) == EXIT_USAGE


def test_validate_exits_2_from_a_real_process(tmp_path: Path, dataset: Path) -> None:
    config = write_config(tmp_path, dataset, "rollout:\n  n: 1\n")

    done = subprocess.run(
        [sys.executable, "-m", "trainer", "validate", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == EXIT_USAGE
    assert "set rollout.n to 2 or more" in done.stderr


# -- presets ------------------------------------------------------------------------------------------


def test_presets_lists_every_preset_with_its_estimator_and_loss(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == EXIT_OK

    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == PRESETS.names()
    ppo = next(line for line in lines if line.startswith("ppo "))
    assert "gae + vanilla, critic, kl none" in ppo


def test_a_config_files_task_brings_its_recipes_defaults_under_the_files_values(tmp_path: Path) -> None:
    path = tmp_path / "hotpot.yaml"
    path.write_text("task: hotpotqa\nrollout: {max_steps: 2}\n")

    config = load_config(path, ["rollout.n=2"])  # the recipe plugins are loaded on the way

    assert (config.algorithm.gamma, config.rollout.tools) == (0.99, ["search"])  # HotpotQA's recipe
    assert (config.rollout.max_steps, config.rollout.n, config.algorithm.estimator) == (2, 2, "grpo")


def test_the_cli_module_imports_without_torch() -> None:
    code = "import sys, trainer.cli, trainer.report, trainer.config; print('torch' in sys.modules)"

    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- run: usage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["run"],
        ["run", "x.yaml", "--run-id", "3", "--api", "http://127.0.0.1:1"],
        ["run", "--run-id", "3", "--api", "http://127.0.0.1:1", "--set", "rollout.n=2"],
    ],
)
def test_run_rejects_a_bad_command_line(argv: list[str]) -> None:
    assert main(argv) == EXIT_USAGE


def test_a_webapp_run_needs_its_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STUDIO_RUN_TOKEN", raising=False)

    assert main(["run", "--run-id", "3", "--api", "http://127.0.0.1:1"]) == EXIT_USAGE
    assert "STUDIO_RUN_TOKEN" in capsys.readouterr().err


def test_a_standalone_run_refuses_a_config_without_a_model(tmp_path: Path, dataset: Path) -> None:
    config = write_config(tmp_path, dataset, "")

    assert main(["run", str(config), "--set", "model.path="]) == EXIT_USAGE


# -- run: outcome, exit codes and signals ----------------------------------------------------------------


def tiny_config() -> RunConfig:
    return RunConfig.from_preset("grpo", **{"model.path": "/models/tiny", "trainer.total_steps": 3})


def test_a_finished_run_reports_succeeded_and_exits_0() -> None:
    seen: list[Any] = []

    def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event) -> None:
        seen.append((config.trainer.total_steps, stop_event.is_set()))
        reporter.log_metrics(1, {"reward/mean": 0.5})

    reporter = MemoryReporter()

    assert run_training(tiny_config(), reporter, train) == EXIT_OK
    assert seen == [(3, False)]
    assert [s[0] for s in reporter.statuses] == ["running", "succeeded"]
    assert reporter.closed


def test_a_run_that_raises_reports_failed_with_the_error_and_exits_1() -> None:
    def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event) -> None:
        raise RuntimeError("out of memory")

    reporter = MemoryReporter()

    assert run_training(tiny_config(), reporter, train) == EXIT_FAILED
    assert reporter.statuses[-1][:2] == ("failed", "RuntimeError: out of memory")
    assert reporter.closed


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, EXIT_SIGTERM), (signal.SIGINT, EXIT_SIGINT)])
def test_a_signal_asks_the_backend_to_stop_after_its_step_and_reports_cancelled(
    signum: int, code: int
) -> None:
    steps_done: list[int] = []

    def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event) -> None:
        for step in range(1, config.trainer.total_steps + 1):
            if step == 2:
                os.kill(os.getpid(), signum)  # arrives mid-step; the step still finishes
                stop_event.wait(30)  # the handler runs in this (main) thread; wait until it has
            steps_done.append(step)
            if stop_event.is_set():
                return

    before = signal.getsignal(signum)
    reporter = MemoryReporter()

    assert run_training(tiny_config(), reporter, train) == code
    assert steps_done == [1, 2]
    assert reporter.statuses[-1][0] == "cancelled"
    assert signal.getsignal(signum) is before  # the handlers are put back


def test_a_second_sigint_stops_at_once() -> None:
    def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        stop_event.wait(30)
        os.kill(os.getpid(), signal.SIGINT)  # the user does not want to wait for the step
        time.sleep(30)  # a long step; the handler's KeyboardInterrupt cuts it short
        raise AssertionError("the second SIGINT should have interrupted the step")

    reporter = MemoryReporter()

    assert run_training(tiny_config(), reporter, train) == EXIT_SIGINT
    assert reporter.statuses[-1][:2] == ("cancelled", "interrupted")


# -- run --run-id: what it fetches ---------------------------------------------------------------------


@pytest.fixture
def webapp() -> Iterator[LoopbackServer]:
    running = LoopbackServer(Recorder()).start()
    yield running
    running.stop()


def test_a_webapp_run_with_a_bad_stored_config_reports_failed_and_exits_2(
    webapp: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stored = json.loads(tiny_config().to_json())
    stored["rollout"]["n"] = 1
    webapp.recorder.files[f"/api/runs/{RUN_ID}/config"] = json.dumps(stored).encode()
    monkeypatch.setenv("STUDIO_RUN_TOKEN", TOKEN)

    code = main(["run", "--run-id", str(RUN_ID), "--api", webapp.url, "--spool-dir", str(tmp_path / "spool")])

    assert code == EXIT_USAGE
    assert "error: rollout.n:" in capsys.readouterr().err
    statuses = [StatusUpdate.model_validate(r.body) for r in webapp.recorder.posts("/status")]
    assert [s.status for s in statuses] == ["failed"]
    assert "set rollout.n to 2 or more" in statuses[0].message


def test_a_webapp_run_without_a_train_split_reports_failed_and_exits_1(
    webapp: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    webapp.recorder.files[f"/api/runs/{RUN_ID}/config"] = tiny_config().to_json().encode()
    monkeypatch.setenv("STUDIO_RUN_TOKEN", TOKEN)

    code = main(["run", "--run-id", str(RUN_ID), "--api", webapp.url, "--spool-dir", str(tmp_path / "spool")])

    assert code == EXIT_FAILED
    gets = [r.path for r in webapp.recorder.requests if r.method == "GET"]
    assert gets == [f"/api/runs/{RUN_ID}/config", f"/api/runs/{RUN_ID}/dataset/train"]
    statuses = [StatusUpdate.model_validate(r.body) for r in webapp.recorder.posts("/status")]
    assert [(s.status, s.message) for s in statuses] == [("failed", "the run has no train split")]


def test_a_run_that_finished_its_last_step_despite_a_signal_reports_succeeded() -> None:
    @dataclass
    class Result:
        status: str

    def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event) -> Result:
        os.kill(os.getpid(), signal.SIGTERM)  # lands during the last step
        stop_event.wait(30)
        return Result("succeeded")

    reporter = MemoryReporter()

    assert run_training(tiny_config(), reporter, train) == EXIT_OK
    assert [s[0] for s in reporter.statuses] == ["running", "succeeded"]
