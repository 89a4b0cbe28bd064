"""The torch backend's checkpoint folders as files on disk, without torch: which ``step_*`` folders
are complete, the newest one, and whether a run can resume from it (docs/resume.md#what-is-resumed).
The web app asks these at request time, so nothing here imports torch."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.backend_protocol import NOT_RESUMABLE, ResumePoint
from trainer.contract import OPTIMIZER_FILE  # what a fork that keeps the optimiser state reads too

PREFIX = "step_"
STATE_FILE = "trainer_state.json"
RNG_FILE = "rng.pt"


def checkpoint_path(root: str | Path, step: int) -> Path:
    return Path(root) / f"{PREFIX}{step:08d}"


def checkpoint_step(path: Path) -> int:
    return int(path.name[len(PREFIX) :])


def complete_checkpoints(root: str | Path | None) -> list[Path]:
    """The complete checkpoints in ``root``, oldest step first."""
    if root is None or not Path(root).is_dir():
        return []
    found = [
        path
        for path in Path(root).iterdir()
        if path.is_dir()
        and path.name.startswith(PREFIX)
        and path.name[len(PREFIX) :].isdigit()
        and (path / STATE_FILE).is_file()
    ]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(root: str | Path | None) -> Path | None:
    """The complete checkpoint with the highest step in ``root``, or None."""
    found = complete_checkpoints(root)
    return found[-1] if found else None


def is_resumable(path: Path) -> bool:
    """Whether the checkpoint holds what training needs to continue exactly: the optimiser and RNG
    states beside the weights (written only when the run set trainer.resume)."""
    if not ((path / OPTIMIZER_FILE).is_file() and (path / RNG_FILE).is_file()):
        return False
    try:
        return bool(json.loads((path / STATE_FILE).read_text()).get("resumable", True))
    except (OSError, ValueError):
        return False


def resume_point(root: str | Path | None, resume_set: bool) -> ResumePoint:
    """Where a run whose checkpoints are in ``root`` continues: its newest complete checkpoint, if it
    is resumable (``resume_set``: the run's trainer.resume)."""
    newest = latest_checkpoint(root)
    if newest is None:
        unset = "" if resume_set else " (its config does not set trainer.resume)"
        return ResumePoint(refusal=f"it has no complete checkpoint to continue from{unset}")
    if not resume_set or not is_resumable(newest):
        return ResumePoint(refusal=f"{NOT_RESUMABLE} (newest: step {checkpoint_step(newest)})")
    return ResumePoint(step=checkpoint_step(newest))
