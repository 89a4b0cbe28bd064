"""The external executor: runs reported from outside, which the studio never starts.

An MLflow client logging through /mlflow/ (docs/mlflow.md) or an uploaded run trained elsewhere
(docs/imports.md) makes a run of this executor. Its status is what its client reports: nothing
polls, stops or reaps it, and its log is only what was sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from webapp.experiments.executors.base import ExecutorState, StartRefused, runs_folder

if TYPE_CHECKING:
    from webapp.experiments.models import Run

NOT_OURS = (
    "run {pk} is reported from outside (an MLflow client or an import): the studio does not start, "
    "poll or stop it; train it where it was logged from, or launch an experiment of your own"
)


class ExternalExecutor:
    name = "external"
    limited_by_team = False
    reaped = False  # its status is its client's (Run.update_from_mlflow)

    def files_dir(self, run: Run) -> Path:
        return runs_folder(Path(settings.VAR_DIR), run)  # the artifacts an MLflow client uploads

    def planned_ref(self, run: Run) -> str:
        return ""

    def start(self, run: Run, token: str) -> str:
        raise StartRefused(NOT_OURS.format(pk=run.pk))

    def poll(self, run: Run) -> ExecutorState:
        raise StartRefused(NOT_OURS.format(pk=run.pk))

    def stop(self, run: Run, *, force: bool = False) -> None:
        """Nothing of ours runs it: there is nothing to stop."""

    def locate(self, run: Run) -> str:
        return ""

    def clean_up(self, run: Run) -> None:
        """Nothing of ours ran: no scratch space was left."""

    def log_tail(self, run: Run, max_bytes: int) -> str:
        return ""  # what the client sent is the whole log
