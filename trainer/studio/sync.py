"""A run folder to the server (docs/sdk.md#offline-and-sync): open its run, put its artifacts, deliver
its spool. The SDK opens its run here when it starts online; ``studio sync`` does all three for a
folder logged offline or left behind by an outage.

Idempotent: the run is found again by its id, an artifact put twice is the same file, and each spool
file carries its batch id, which the server stores once (docs/contract.md#idempotency); a delivered
file is deleted, so a second sync has nothing left to send.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx
from tqdm import tqdm

from trainer.contract import MLFLOW_ARTIFACT_PATH
from trainer.report.retry import POLICY, PermanentHttpError, raise_for_status, run_api_client
from trainer.report.spool import SpoolingReporter, deliver_file, reject, spool_files
from trainer.studio.client import Settings, StudioClient, StudioError
from trainer.studio.run_folder import RunFolder, RunRecord, default_dir, writer_gone


@dataclass(frozen=True)
class Opened:
    """The server's run of a folder, and what its reports carry."""

    url: str
    run_id: int
    token: str
    claimant: str
    experiment_id: int
    mlflow_run_id: str


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_on_server(client: StudioClient, record: RunRecord, resume: str) -> Opened:
    """Make or resume the record's run; the record learns where it is."""
    answer = client.open_sdk_run(record.open_body(resume, worker_name()))
    run = answer["run"]
    url = client.settings.url.rstrip("/")
    where = {
        "run_id": run["id"],
        "experiment_id": run["experiment_id"],
        "mlflow_run_id": run["mlflow_run_id"],
    }
    record.name = run["name"]
    record.server = {"url": url, "team": client.settings.team, **where}
    return Opened(url=url, token=answer["token"], claimant=answer["claimant"], **where)


def put_artifact(http: httpx.Client, opened: Opened, path: Path) -> None:
    """One file onto the run through MLflow's artifact service, with the run's token."""
    target = MLFLOW_ARTIFACT_PATH.format(
        experiment_id=opened.experiment_id, mlflow_run_id=opened.mlflow_run_id, name=path.name
    )
    with path.open("rb") as handle:
        raise_for_status(http.put(target, content=handle.read()))


def run_client(opened: Opened) -> httpx.Client:
    return run_api_client(opened.url, opened.token, timeout_s=60.0, claimant=opened.claimant)


def end_if_died(folder: RunFolder) -> bool:
    """A folder whose script died without finish() (killed, crashed, its machine rebooted) gets the
    end its script never wrote: a failed status after its last batch, so its run does not stay
    running (docs/sdk.md#a-script-that-died). True when this call ended it; a folder still written
    by a live process is left alone."""
    record = folder.read()
    if record.finished or not writer_gone(record.writer):
        return False
    pid, host = record.writer["pid"], record.writer["host"]
    message = f"never finished: its script (process {pid} on {host}) ended without finish()"
    SpoolingReporter(folder.spool).set_status("failed", message)
    record.finished, record.never_finished, record.synced = True, True, False
    folder.write(record)
    return True


def sync_folder(client: StudioClient, folder: RunFolder, progress: Callable[[int], None]) -> str:
    """Bring one folder in; what happened, in a line. StudioError when the server refuses the run."""
    record = folder.read()
    files = spool_files(folder.spool)
    if record.synced or (not files and record.server and record.finished):
        return f"{folder.path}: already synced (run {record.server.get('run_id')})"
    opened = open_on_server(client, record, "allow")
    folder.write(record)
    refused = 0
    with run_client(opened) as http:
        retrying = POLICY.retrying()
        for artifact in folder.artifact_files():
            retrying(put_artifact, http, opened, artifact)
        for path in files:
            try:
                retrying(deliver_file, http, opened.run_id, path)
            except PermanentHttpError:
                reject(path)
                refused += 1
            progress(1)
    record.synced = True
    folder.write(record)
    note = f", {refused} refused (kept in {folder.spool / 'rejected'})" if refused else ""
    ended = "" if record.finished else " (its script has not finished it)"
    if record.never_finished:
        ended = " (failed: its script never finished it)"
    return f"{folder.path}: run {opened.run_id} {record.name!r}, {len(files)} batches sent{note}{ended}"


def run_folders(paths: Sequence[Path]) -> list[RunFolder]:
    """Each path that is a run folder, and the run folders directly inside each one that is not."""
    found: list[RunFolder] = []
    for path in paths:
        if RunFolder.is_one(path):
            found.append(RunFolder(path))
        elif path.is_dir():
            found += [RunFolder(p) for p in sorted(path.iterdir()) if RunFolder.is_one(p)]
    return found


@click.command("sync")
@click.argument("dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.pass_context
def sync(ctx: click.Context, dirs: tuple[Path, ...]) -> None:
    """Upload runs the SDK logged offline (or kept through an outage): run folders, or folders of them
    (default: ./studio-runs). Safe to repeat: what is on the server is not stored again."""
    folders = run_folders(list(dirs) or [default_dir()])
    if not folders:
        raise click.BadParameter("no run folders (with a run.json) found", param_hint="DIRS")
    settings: Any = getattr(ctx.find_root().obj, "settings", None) or Settings.load()
    client = StudioClient(settings)
    for folder in folders:
        end_if_died(folder)
    total = sum(len(spool_files(folder.spool)) for folder in folders)
    lines = []
    with tqdm(total=total, unit="batch", desc="syncing", file=sys.stderr) as bar:
        for folder in folders:
            try:
                lines.append(sync_folder(client, folder, bar.update))
            except StudioError as error:
                if error.status in (0, 401):
                    raise
                lines.append(f"{folder.path}: refused: {error}")
    click.echo("\n".join(lines))
