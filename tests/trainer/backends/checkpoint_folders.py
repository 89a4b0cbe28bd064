"""Checkpoint folders as the torch backend leaves them, without training: for the tests of resuming."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.backends.torch.checkpoint_folders import OPTIMIZER_FILE, RNG_FILE, STATE_FILE, checkpoint_path


def torch_checkpoint(folder: Path, step: int, *, resumable: bool) -> Path:
    path = checkpoint_path(folder, step)
    (path / "policy").mkdir(parents=True)
    (path / STATE_FILE).write_text(json.dumps({"step": step, "resumable": resumable}))
    if resumable:
        (path / OPTIMIZER_FILE).write_bytes(b"o")
        (path / RNG_FILE).write_bytes(b"r")
    return path
