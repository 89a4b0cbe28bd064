"""Where a run's files are: the folder its executor gives it, and the checkpoints' folder inside it
(docs/checkpoints.md#downloading). Of a checkpoint the trainer reported, only a folder inside the
run's own checkpoint folder is ever read: its path is taken as a claim, not as a place to read files
from. Evaluations read a checkpoint's weights from it, the results pages download it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from webapp.experiments.executors import executor_of

if TYPE_CHECKING:  # the ingestion app stores the trainer's reports; it sits above this one
    from webapp.experiments.models import Run
    from webapp.ingestion.models import Checkpoint


def run_files_dir(run: Run) -> Path:
    """The folder of a run's files, where its executor says: under STUDIO_VAR_DIR for local runs, on
    storage every node shares for Ray runs."""
    return executor_of(run).files_dir(run)


def checkpoint_dir(run: Run) -> str:
    return str(run_files_dir(run) / "checkpoints")


def checkpoint_folder(checkpoint: Checkpoint) -> Path | None:
    """The checkpoint's folder when its files are there and it lies inside its run's checkpoint folder."""
    if checkpoint.deleted:
        return None
    root = Path(checkpoint_dir(checkpoint.run)).resolve()
    folder = Path(checkpoint.path).resolve()
    return folder if folder.is_relative_to(root) and folder != root and folder.is_dir() else None
