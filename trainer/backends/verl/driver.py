"""The verl run's own process: stage the data, start ``verl.trainer.main_ppo``, watch it.

``python -m trainer run --run-id N`` lands here for a verl run (the CLI claims the run, reports
``running`` and the final status). This process runs verl's trainer as a child, streams its output
into our log, forwards a stop request to it as SIGTERM, and registers each checkpoint verl saves.
It sends no heartbeats: progress comes from verl's own metrics, so a job that waits forever for
Ray resources shows no progress and the webapp's watchdog can mark it stalled.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from trainer.backend_protocol import NOT_RESUMABLE, ResumePoint
from trainer.backends.verl.command import VerlPaths, command, shared_paths
from trainer.backends.verl.setup_hook import HOOK
from trainer.backends.verl.sft_command import sft_command
from trainer.contract import MLFLOW_TRACKING_URI_ENV, PROJECT_ENV, RUN_ID_ENV

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

logger = logging.getLogger(__name__)
verl_output = logging.getLogger("trainer.verl")

LATEST_FILE = "latest_checkpointed_iteration.txt"
# What verl's FSDP checkpoint manager names each rank's optimiser state in global_step_N/actor/.
OPTIMIZER_FILES = "optim_world_size_*_rank_*.pt"
# Ray puts the submitted job's config (runtime_env included) into the entrypoint's environment.
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
POLL_S = 2.0
STOP_GRACE_S = 60.0


@dataclass
class VerlResult:
    status: Literal["succeeded", "cancelled"]
    last_checkpoint_step: int | None
    returncode: int


class CheckpointWatcher:
    """Reports each ``global_step_N`` folder once verl names it in ``latest_checkpointed_iteration.txt``.

    verl writes that file only after a save completed, so a folder it names is whole.
    """

    def __init__(self, checkpoint_dir: str | Path, reporter: Reporter) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.reporter = reporter
        # A resumed run's checkpoint was reported by the attempt that saved it (docs/resume.md).
        self.last_step: int | None = latest_saved_step(self.checkpoint_dir)

    def poll(self) -> int | None:
        """Report a new checkpoint if there is one; the step reported, else None."""
        step = latest_saved_step(self.checkpoint_dir)
        if step is None or step == self.last_step:
            return None
        self.last_step = step
        self.reporter.log_checkpoint(step, str(step_folder(self.checkpoint_dir, step)))
        return step


def step_folder(checkpoint_dir: Path, step: int) -> Path:
    return checkpoint_dir / f"global_step_{step}"


def latest_saved_step(checkpoint_dir: Path) -> int | None:
    """The step of the newest checkpoint verl completed: the one ``latest_checkpointed_iteration.txt``
    names, when its ``global_step_N`` folder is there; None before the first save."""
    try:
        step = int((checkpoint_dir / LATEST_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None  # not written yet, or caught mid-write: the next poll sees it
    return step if step_folder(checkpoint_dir, step).is_dir() else None


def verl_resume_point(config: RunConfig) -> ResumePoint:
    """Where verl's ``trainer.resume_mode=auto`` continues the run: the step its checkpoint folder's
    ``latest_checkpointed_iteration.txt`` names, when that checkpoint holds the optimiser state
    (``save_contents`` has it only when the run set trainer.resume; docs/resume.md#what-is-resumed)."""
    try:
        folder = Path(shared_paths(config, run_dir(config)).checkpoint_dir)
    except ValueError as exc:
        return ResumePoint(refusal=str(exc))
    step = latest_saved_step(folder)
    if step is None:
        return ResumePoint(refusal=f"verl completed no checkpoint in {folder} ({LATEST_FILE} names none)")
    actor = step_folder(folder, step) / "actor"
    if not config.trainer.resume or not any(actor.glob(OPTIMIZER_FILES)):
        return ResumePoint(refusal=f"{NOT_RESUMABLE} (newest: step {step})")
    return ResumePoint(step=step)


def run_dir(config: RunConfig) -> Path:
    """The run's folder on shared storage: the parent of trainer.checkpoint_dir."""
    if not config.trainer.checkpoint_dir:
        raise ValueError(
            "backend verl needs trainer.checkpoint_dir on storage every Ray node sees "
            "(the webapp sets <STUDIO_SHARED_DIR>/runs/<id>/checkpoints)"
        )
    return Path(config.trainer.checkpoint_dir).expanduser().resolve().parent


def stage(config: RunConfig) -> tuple[VerlPaths, Path]:
    """Copy the datasets to shared storage and write the files verl's workers read; (paths, config file)."""
    from trainer.backends.verl.agent_loop import write_agent_loop_config

    folder = run_dir(config)
    # verl saves where the config says, whatever that folder's name (the layout assumes "checkpoints").
    checkpoint_dir = str(Path(config.trainer.checkpoint_dir or "").expanduser().resolve())
    paths = dataclasses.replace(shared_paths(config, folder), checkpoint_dir=checkpoint_dir)
    _copy(config.data.train_path, paths.train_files)
    if config.data.val_path and paths.val_files:
        _copy(config.data.val_path, paths.val_files)
    staged = config.with_overrides(**{"data.train_path": paths.train_files, "data.val_path": paths.val_files})
    config_file = folder / "run_config.json"
    config_file.write_text(staged.to_json(indent=2), encoding="utf-8")
    write_agent_loop_config(paths.agent_loop_config, config_file)
    return paths, config_file


def _copy(source: str, target: str) -> None:
    if not source:
        raise ValueError("data.train_path is empty: set it to a parquet file of training rows")
    if Path(source).resolve() == Path(target).resolve():
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    partial = Path(target + ".part")
    shutil.copyfile(source, partial)
    os.replace(partial, target)


def verl_command(config: RunConfig, paths: VerlPaths) -> list[str]:
    run_id = os.environ.get(RUN_ID_ENV)
    name = f"{config.name}-run{run_id}" if run_id else config.name
    # Webapp runs get MLFLOW_TRACKING_URI from their Ray job; without it verl's mlflow logger would
    # fall back to a local sqlite file, so a run outside the webapp logs to the console only.
    wanted = {"console": config.report.console, "mlflow": bool(os.environ.get(MLFLOW_TRACKING_URI_ENV))}
    loggers = tuple(logger_name for logger_name, on in wanted.items() if on)
    project = os.environ.get(PROJECT_ENV, "agent-r1-studio")
    # Hydra writes its outputs/ folder into the working directory, which for a Ray job is wherever
    # the cluster was started: keep it with the run instead.
    hydra_dir = f"hydra.run.dir={Path(paths.checkpoint_dir).parent / 'hydra'}"
    if config.sft.enabled:  # verl's own SFT trainer under torchrun: no Ray, so no setup hook
        torchrun = (sys.executable, "-m", "torch.distributed.run")
        argv = sft_command(config, paths, project=project, run_name=name, torchrun=torchrun, loggers=loggers)
        return [*argv, hydra_dir]
    argv = command(config, paths, project=project, run_name=name, python=sys.executable, loggers=loggers)
    return [*argv, hydra_dir, *setup_hook_overrides()]


def setup_hook_overrides() -> list[str]:
    """Install our setup hook through verl's ray.init unless the Ray job already sets one.

    Ray refuses to merge a job's runtime env with ray.init's when both name the same field, so the
    hook goes in exactly one of them: the job's (the webapp's ray executor) or, outside a Ray job
    (the GPU smoke run, a laptop), verl's own ray.init.
    """
    job = json.loads(os.environ.get(RAY_JOB_CONFIG_ENV, "{}") or "{}")
    if (job.get("runtime_env") or {}).get("worker_process_setup_hook"):
        return []
    return [f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={HOOK}"]


def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None) -> VerlResult:
    """Run verl's trainer for ``config`` until it exits; raise when it fails without a stop request."""
    paths, _ = stage(config)
    argv = verl_command(config, paths)
    logger.info("starting verl: %s", " ".join([*argv[:3], "..."]))
    stop = stop_event or threading.Event()
    watcher = CheckpointWatcher(paths.checkpoint_dir, reporter)
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, errors="replace"
    )
    assert process.stdout is not None  # Popen with PIPE always gives one
    pump = threading.Thread(target=_pump, args=(process.stdout,), name="verl-output", daemon=True)
    pump.start()
    returncode = _supervise(process, watcher, stop)
    pump.join(timeout=10)
    watcher.poll()  # the save at the last step lands just before verl exits
    if stop.is_set():
        return VerlResult("cancelled", watcher.last_step, returncode)
    if returncode != 0:
        raise RuntimeError(f"verl's trainer exited with code {returncode}; its output is in the run's log")
    return VerlResult("succeeded", watcher.last_step, returncode)


def _supervise(process: subprocess.Popen[str], watcher: CheckpointWatcher, stop: threading.Event) -> int:
    """Poll checkpoints until the child exits; on a stop request, SIGTERM it, then kill after a grace."""
    stop_sent_at: float | None = None
    while True:
        returncode = process.poll()
        watcher.poll()
        if returncode is not None:
            return returncode
        if stop.is_set() and stop_sent_at is None:
            logger.warning("stop requested: sending SIGTERM to verl (pid %d)", process.pid)
            process.send_signal(signal.SIGTERM)
            stop_sent_at = time.monotonic()
        if stop_sent_at is not None and time.monotonic() - stop_sent_at > STOP_GRACE_S:
            logger.warning("verl did not exit %ds after SIGTERM: killing it", int(STOP_GRACE_S))
            process.kill()
            return process.wait()
        stop.wait(POLL_S)


def _pump(stream: IO[str]) -> None:
    for line in stream:
        verl_output.info("%s", line.rstrip("\n"))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m trainer.backends.verl.driver CONFIG.yaml [--dry-run]``: a run without the webapp.

    Stages the data and agent-loop files, prints verl's command, and (without ``--dry-run``) runs it
    with console reporting. The GPU smoke script uses this; webapp runs go through ``python -m trainer run``.
    """
    from trainer.config import RunConfig
    from trainer.plugins import load_plugins
    from trainer.report.reporters import ConsoleReporter

    parser = argparse.ArgumentParser(prog="python -m trainer.backends.verl.driver")
    parser.add_argument("config", type=Path, help="RunConfig YAML with backend verl")
    parser.add_argument("--dry-run", action="store_true", help="stage and print the command, do not run it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_plugins()
    config = RunConfig.from_yaml_file(args.config)
    if args.dry_run:
        paths, _ = stage(config)
        print(shlex.join(verl_command(config, paths)))
        return 0
    result = train(config, ConsoleReporter())
    logger.info("verl run %s (last checkpoint: step %s)", result.status, result.last_checkpoint_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
