"""Where a run's checkpoints are on disk (docs/checkpoints.md#downloading): only a folder inside the
run's own checkpoint folder (webapp.experiments.services.checkpoint_dir) is ever read; the path a
trainer reported is taken as a claim, not as a place to read files from. Evaluations read a
checkpoint's weights from it, the results pages download it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from webapp.experiments.services import checkpoint_dir

if TYPE_CHECKING:  # the ingestion app stores the trainer's reports; it sits above this one
    from webapp.ingestion.models import Checkpoint


def checkpoint_folder(checkpoint: Checkpoint) -> Path | None:
    """The checkpoint's folder when its files are there and it lies inside its run's checkpoint folder."""
    if checkpoint.deleted:
        return None
    root = Path(checkpoint_dir(checkpoint.run)).resolve()
    folder = Path(checkpoint.path).resolve()
    return folder if folder.is_relative_to(root) and folder != root and folder.is_dir() else None
