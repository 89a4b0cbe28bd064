"""Where a run that ended continues (docs/resume.md#what-is-resumed): each backend reads its own
checkpoint folder, the torch backend's ``step_N`` and verl's ``global_step_N`` with
``latest_checkpointed_iteration.txt``, and refuses weights-only checkpoints and an empty folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

from tests.trainer.backends.checkpoint_folders import torch_checkpoint
from tests.trainer.backends.verl.test_verl_command import verl_config
from trainer.backends import BACKENDS
from trainer.backends.verl.command import shared_paths
from trainer.backends.verl.driver import LATEST_FILE, CheckpointWatcher, run_dir, verl_command
from trainer.config import RunConfig
from trainer.report.reporters import MemoryReporter


def torch_config(folder: Path, *, resume: bool = True) -> RunConfig:
    settings = {"model.path": "tiny-test", "trainer.checkpoint_dir": str(folder), "trainer.resume": resume}
    return RunConfig.from_preset("grpo", task="arithmetic", **settings)


def test_a_torch_run_continues_from_its_newest_complete_resumable_checkpoint(tmp_path: Path) -> None:
    torch_checkpoint(tmp_path, 2, resumable=True)
    torch_checkpoint(tmp_path, 4, resumable=True)
    (tmp_path / "step_00000006.tmp").mkdir()  # killed mid-save: never renamed into place
    point = BACKENDS.get("torch").resume_point(torch_config(tmp_path))
    assert (point.step, point.refusal) == (4, "")


def test_a_torch_run_without_a_resumable_checkpoint_is_refused_with_the_reason(tmp_path: Path) -> None:
    torch = BACKENDS.get("torch")
    assert "no complete checkpoint" in str(torch.resume_point(torch_config(tmp_path)).refusal)
    unset = torch.resume_point(torch_config(tmp_path, resume=False)).refusal
    assert "no complete checkpoint" in unset and "does not set trainer.resume" in unset
    torch_checkpoint(tmp_path, 3, resumable=False)
    for config in (torch_config(tmp_path), torch_config(tmp_path, resume=False)):
        point = torch.resume_point(config)
        assert point.step is None and "weights only" in point.refusal and "optimiser" in point.refusal
        assert "step 3" in point.refusal


def verl_run(tmp_path: Path, **overrides: Any) -> RunConfig:
    return verl_config(
        "grpo", **{"trainer.checkpoint_dir": str(tmp_path / "runs" / "7" / "checkpoints"), **overrides}
    )


def verl_checkpoint(config: RunConfig, step: int, *, optimizer: bool) -> Path:
    """What verl's trainer leaves after a save: global_step_N/actor/ and then the tracker file."""
    folder = Path(shared_paths(config, run_dir(config)).checkpoint_dir)
    actor = folder / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_8_rank_0.pt").write_bytes(b"m")
    if optimizer:
        (actor / "optim_world_size_8_rank_0.pt").write_bytes(b"o")
    (folder / LATEST_FILE).write_text(str(step))
    return folder


def test_a_resumed_verl_run_finds_the_checkpoint_verl_itself_resumes_from(tmp_path: Path) -> None:
    config = verl_run(tmp_path, **{"trainer.resume": True})
    folder = verl_checkpoint(config, 20, optimizer=True)
    (folder / "global_step_30" / "actor").mkdir(parents=True)  # a save in progress: not named yet

    assert BACKENDS.get("verl").resume_point(config).step == 20
    argv = verl_command(config, shared_paths(config, run_dir(config)))
    assert "trainer.resume_mode=auto" in argv
    assert "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra]" in argv
    local_dir = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("trainer.default_local_dir="))
    # verl's own lookup (resume_mode=auto) in the folder the command names finds the same checkpoint.
    assert find_latest_ckpt_path(local_dir) == str(folder / "global_step_20")


def test_a_verl_run_without_a_resumable_checkpoint_is_refused_with_the_reason(tmp_path: Path) -> None:
    verl = BACKENDS.get("verl")
    config = verl_run(tmp_path, **{"trainer.resume": True})
    assert "names none" in verl.resume_point(config).refusal
    verl_checkpoint(config, 5, optimizer=False)
    weights_only = verl.resume_point(config)
    assert (
        weights_only.step is None
        and "weights only" in weights_only.refusal
        and "step 5" in weights_only.refusal
    )
    assert "weights only" in verl.resume_point(verl_run(tmp_path)).refusal  # trainer.resume off


def test_the_checkpoint_a_resumed_verl_run_starts_from_is_not_reported_twice(tmp_path: Path) -> None:
    folder = verl_checkpoint(verl_run(tmp_path, **{"trainer.resume": True}), 20, optimizer=True)
    reporter = MemoryReporter()
    watcher = CheckpointWatcher(folder, reporter)
    assert watcher.poll() is None and reporter.checkpoints == []
    (folder / "global_step_25").mkdir()
    (folder / LATEST_FILE).write_text("25")
    assert watcher.poll() == 25 and [step for step, _, _ in reporter.checkpoints] == [25]
