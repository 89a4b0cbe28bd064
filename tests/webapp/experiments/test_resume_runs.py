"""Resuming a run for real (docs/resume.md): two runs of one tiny deterministic config are launched
through a Celery worker, one straight to step 6, the other killed with ``kill -9`` once its checkpoint of
step 3 is written and then resumed with ``studio runs resume``. The resumed run ends with the straight
run's weights (to 1e-6) and the straight run's stored metrics, one point per step, and lists its two
attempts."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from tests.webapp.experiments.test_launching import settled, settled_by_reaper, tiny_config, trainer_processes
from tests.webapp.polling import poll_until
from trainer.backends.torch.checkpoint_folders import checkpoint_path
from trainer.config import RunConfig
from trainer.contract import POLICY_FOLDER
from trainer.studio.cli import main
from webapp.accounts.models import ApiToken
from webapp.experiments.acceptance import LAUNCH_CHECKPOINT_DIR
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion.models import MetricPoint, Trajectory

pytestmark = pytest.mark.slow

STEPS, KILLED_AFTER = 6, 3
# What a training step computes; timings, throughput and sizes differ between any two processes.
COMPUTED = ("reward/mean", "reward/std", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/kl",
            "response_length/mean")  # fmt: skip


def resumable_config(datasets: dict[str, Any], name: str) -> RunConfig:
    """The tiny launched run, 6 steps, a resumable checkpoint every 3 (a single thread: the same sums
    in the same order in both runs)."""
    return tiny_config(datasets, steps=STEPS).with_overrides(
        **{"name": name, "trainer.save_every": KILLED_AFTER, "trainer.resume": True, "trainer.keep_checkpoints": None,
           "trainer.checkpoint_dir": LAUNCH_CHECKPOINT_DIR}
    )  # fmt: skip


def launch(personas: Any, config: RunConfig) -> Run:
    (run,) = Experiment.create(personas["acme"], personas["alice"], config, [1]).launch().runs
    return run


def kill_when_checkpointed(run: Run, step: int) -> None:
    """SIGSTOP the trainer as soon as its checkpoint of ``step`` is complete (its step_N folder is
    renamed into place whole), then SIGKILL it: the steps after it were posted or not, as a crash leaves."""
    folder = checkpoint_path(checkpoint_dir(run), step)
    poll_until(lambda: folder.is_dir(), every_s=0.02)
    run.refresh_from_db()
    victims = poll_until(lambda: [p for p in trainer_processes(run) if "python" in p.name()])
    for proc in victims:
        proc.send_signal(signal.SIGSTOP)
    assert not checkpoint_path(checkpoint_dir(run), STEPS).exists()  # stopped before its end
    for proc in victims:
        proc.send_signal(signal.SIGKILL)


def stored(run: Run) -> dict[str, list[tuple[int, float]]]:
    rows = MetricPoint.objects.filter(run=run, key__name__in=COMPUTED).order_by("step")
    found: dict[str, list[tuple[int, float]]] = {}
    for key, step, value in rows.values_list("key__name", "step", "value"):
        found.setdefault(key, []).append((step, value))
    return found


def weights(run: Run) -> dict[str, torch.Tensor]:
    return load_file(checkpoint_path(checkpoint_dir(run), STEPS) / POLICY_FOLDER / "model.safetensors")


def resume_with_the_cli(run: Run, personas: Any, url: str, tmp_path: Path, monkeypatch: Any) -> str:
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    token = ApiToken.issue(personas["alice"], "cli")[1]
    runner = CliRunner()
    runner.invoke(main, ["login", "--url", url, "--team", "acme", "--token", token], catch_exceptions=False)
    result = runner.invoke(main, ["runs", "resume", str(run.pk)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_run_killed_at_step_3_and_resumed_ends_as_the_straight_run_with_one_point_per_step(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    start_worker()
    straight = launch(personas, resumable_config(arithmetic, "straight"))
    killed = launch(personas, resumable_config(arithmetic, "killed"))
    kill_when_checkpointed(killed, KILLED_AFTER)
    poll_until(lambda: settled_by_reaper(killed), every_s=0.5)
    assert killed.status == RunStatus.FAILED, killed.message

    said = resume_with_the_cli(killed, personas, launch_env.url, tmp_path, monkeypatch)
    assert f"attempt 2 continues from its checkpoint of step {KILLED_AFTER}" in said
    # What the killed attempt stored after its checkpoint is gone before the new attempt reports.
    assert not MetricPoint.objects.filter(run=killed, step__gt=KILLED_AFTER).exists()
    assert not Trajectory.objects.filter(run=killed, training_step__gt=KILLED_AFTER).exists()

    poll_until(lambda: settled(straight) and settled(killed), every_s=0.5)
    assert (straight.status, killed.status) == (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED), killed.message
    expected, resumed = weights(straight), weights(killed)
    assert all(torch.allclose(expected[name], resumed[name], atol=1e-6) for name in expected)
    straight_points, resumed_points = stored(straight), stored(killed)
    assert sorted(resumed_points) == sorted(straight_points) and "reward/mean" in resumed_points
    for key, series in straight_points.items():
        assert [step for step, _ in resumed_points[key]] == list(range(1, STEPS + 1)), key
        assert [v for _, v in resumed_points[key]] == pytest.approx(
            [v for _, v in series], rel=1e-5, abs=1e-7
        ), key
    assert Trajectory.objects.filter(run=killed).count() == Trajectory.objects.filter(run=straight).count()
    attempts = list(killed.attempts.values_list("number", "resumed_from_step", "end_status"))
    assert attempts == [(1, None, RunStatus.FAILED), (2, KILLED_AFTER, RunStatus.SUCCEEDED)]
