"""The local executor: the trainer as a detached process group on this machine."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from django.conf import settings

from webapp.experiments.executors.base import ExecutorState, job_for, launch_env, runs_folder

if TYPE_CHECKING:
    from webapp.experiments.models import Run

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[3]
LOG_FILE = "train.log"  # the trainer's stdout and stderr, kept beside its exit code


def run_dir(run: Run) -> Path:
    """The run's folder under STUDIO_VAR_DIR, made if missing: its log, exit code and scratch space."""
    path = runs_folder(Path(settings.VAR_DIR), run)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie does not count). The group's leader, the
    launch shell whose pid is the group id, answers at once while it lives; a member outliving it (the
    shell killed alone) is found by scanning the process table, which is what a reaper pass over many
    runs cannot afford for each (docs/scaling.md#the-reaper)."""
    return _runs_in_group(pgid, pgid) or any(
        _runs_in_group(proc.pid, pgid) for proc in psutil.process_iter(["pid"])
    )


def _runs_in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (ProcessLookupError, psutil.Error):
        return False


class LocalExecutor:
    """A detached process group on this machine: ``sh -c 'python -m trainer ...; echo $? > exit_code'``.

    The shell wrapper first writes its process group id to ``pgid`` (so a start whose worker died
    before recording it can still be found), runs the trainer with its temporary files under
    ``tmp/``, removes them and records the trainer's exit status (the worker that started it is not
    its parent for long: the launch helper exits at once, so init reaps it and no zombie is left).
    """

    name = "local"
    limited_by_team = True  # the trainers share this machine's CPUs and memory
    reaped = True

    def files_dir(self, run: Run) -> Path:
        return runs_folder(Path(settings.VAR_DIR), run)

    def planned_ref(self, run: Run) -> str:
        return ""  # the process group id is known once the process exists

    def start(self, run: Run, token: str) -> str:
        directory = run_dir(run)
        exit_file, pgid_file, scratch = directory / "exit_code", directory / "pgid", directory / "tmp"
        exit_file.unlink(missing_ok=True)
        pgid_file.unlink(missing_ok=True)
        scratch.mkdir(exist_ok=True)
        job = job_for(run, token)
        command = " ".join([shlex.quote(sys.executable), *map(shlex.quote, job.argv)])
        paths = {"exit": exit_file, "pgid": pgid_file, "tmp": scratch, "log": directory / LOG_FILE}
        q = {name: shlex.quote(str(path)) for name, path in paths.items()}
        script = (
            f"echo $$ > {q['pgid']}.part && mv {q['pgid']}.part {q['pgid']}; {command} >> {q['log']} 2>&1; "
            f"code=$?; rm -rf {q['tmp']}; echo $code > {q['exit']}"
        )
        # TMPDIR: the trainer's dataset copy and report spool land in the run's scratch folder,
        # which the wrapper (or the reaper, when the whole group was killed) removes.
        env = {**os.environ, **launch_env(job), "TMPDIR": str(scratch)}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # the trainer never imports Django
        # Double fork through a helper that exits at once: the trainer outlives this worker.
        detach = [sys.executable, "-m", "webapp.experiments.detach", "sh", "-c", script]
        helper = subprocess.run(
            detach, env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        )
        pgid = int(helper.stdout.strip())
        logger.info("run %s started locally as process group %s", run.pk, pgid)
        return f"pgid:{pgid}"

    def poll(self, run: Run) -> ExecutorState:
        pgid = _pgid(run)
        if pgid is None:
            return ExecutorState(alive=False, started=False, message="no process was recorded for this run")
        if _group_alive(pgid):
            return ExecutorState(alive=True)
        exit_file = self.files_dir(run) / "exit_code"
        process = "evaluation process" if run.is_evaluation else "training process"
        if exit_file.exists():
            code = int(exit_file.read_text().strip() or -1)
            return ExecutorState(
                alive=False, exit_code=code, message=f"the {process} exited with code {code}"
            )
        return ExecutorState(alive=False, message=f"the {process} disappeared (killed?) without an exit code")

    def stop(self, run: Run, *, force: bool = False) -> None:
        pgid = _pgid(run)
        if pgid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL if force else signal.SIGTERM)

    def locate(self, run: Run) -> str:
        try:
            return f"pgid:{int((self.files_dir(run) / 'pgid').read_text().strip())}"
        except (OSError, ValueError):
            return ""

    def clean_up(self, run: Run) -> None:
        shutil.rmtree(self.files_dir(run) / "tmp", ignore_errors=True)

    def log_tail(self, run: Run, max_bytes: int) -> str:
        path = self.files_dir(run) / LOG_FILE
        if not path.exists():
            return ""
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - max_bytes))
            return handle.read().decode("utf-8", errors="replace")


def _pgid(run: Run) -> int | None:
    if not run.executor_ref.startswith("pgid:"):
        return None
    return int(run.executor_ref.removeprefix("pgid:"))
