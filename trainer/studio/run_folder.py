"""A run's local folder, which the SDK writes and ``studio sync`` reads (docs/sdk.md#the-run-folder):

- ``run.json``: what the script said about the run (project, name, config, tags, summary, ...),
  the process writing it, whether it finished, and the server's run once one was opened;
- ``spool/``: its reports, in the trainer's spool format (trainer/report/spool.py);
- ``artifacts/``: copies of the files ``log_artifact`` was given.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

DIR_ENV = "STUDIO_DIR"  # where the SDK puts run folders
DEFAULT_DIR = "studio-runs"
RECORD = "run.json"
SPOOL = "spool"
ARTIFACTS = "artifacts"


def default_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


@dataclass
class RunRecord:
    id: str
    project: str
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    # The server's run once opened: {"url", "team", "run_id", "experiment_id", "mlflow_run_id"}.
    server: dict[str, Any] = field(default_factory=dict)
    # The process logging the run: {"host", "pid", "started"} (this_process); empty in older folders.
    writer: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    exit_code: int | None = None
    never_finished: bool = False  # ended by `studio sync`: its process died without finish()
    synced: bool = False  # everything in the folder is on the server

    def open_body(self, resume: str, worker: str) -> dict[str, Any]:
        """The body of the SDK's open route (webapp/experiments/sdk_api.py) for this run."""
        opening = {"project": self.project, "name": self.name, "id": self.id}
        return {**opening, "resume": resume, "worker": worker, **self.meta_body()}

    def meta_body(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "summary": self.summary,
            "tags": self.tags,
            "group": self.group,
            "job_type": self.job_type,
        }


def this_process() -> dict[str, Any]:
    """Who writes a run folder: the host, the process id and the process's start time (an id alone
    may be taken again by a later process)."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}


def writer_gone(writer: dict[str, Any]) -> bool:
    """Whether the process that wrote a run folder has ended (docs/sdk.md#a-script-that-died): it ran
    on this host and no live process has its id and start time. False while it runs, and when this
    host cannot tell: it ran on another one, or the folder does not say (an older SDK's)."""
    if not writer or writer.get("host") != socket.gethostname():
        return False
    try:
        found = psutil.Process(int(writer["pid"]))
        return found.status() == psutil.STATUS_ZOMBIE or abs(found.create_time() - writer["started"]) > 1
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:  # another user's live process
        return False


class RunFolder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.spool = path / SPOOL
        self.artifacts = path / ARTIFACTS

    @staticmethod
    def is_one(path: Path) -> bool:
        return (path / RECORD).is_file()

    def read(self) -> RunRecord:
        return RunRecord(**json.loads((self.path / RECORD).read_text(encoding="utf-8")))

    def write(self, record: RunRecord) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        temporary = self.path / f".{RECORD}.tmp"
        temporary.write_text(json.dumps(asdict(record), indent=2, default=str), encoding="utf-8")
        os.replace(temporary, self.path / RECORD)  # never half a record, even when killed mid-write

    def artifact_files(self) -> list[Path]:
        if not self.artifacts.is_dir():
            return []
        return sorted(p for p in self.artifacts.iterdir() if p.is_file())
