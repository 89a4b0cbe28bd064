"""The REST client ``studio`` uses: where the server is, the token, and one call per operation.

Settings come from the environment (STUDIO_URL, STUDIO_TOKEN, STUDIO_TEAM) over the config file
``studio login`` writes (``$STUDIO_CONFIG``, default ``~/.config/agent-r1-studio/studio.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx

from trainer.contract import API_ROOT, SDK_META_PATH, SDK_OPEN_PATH

CONFIG_ENV = "STUDIO_CONFIG"
DEFAULT_CONFIG = Path("~/.config/agent-r1-studio/studio.json")
# The statuses after which a run changes no more (webapp.experiments.models.TERMINAL).
FINISHED = ("succeeded", "failed", "cancelled")
# The statuses after which a job changes no more (webapp.experiments.jobs.JobStatus).
JOB_FINISHED = ("done", "failed")
_HASH_BLOCK = 2**20


class StudioError(Exception):
    """An answer the command cannot go on from; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass
class Settings:
    url: str = ""
    token: str = ""
    team: str = ""

    @classmethod
    def load(cls) -> Settings:
        stored = read_config()
        return cls(
            url=os.environ.get("STUDIO_URL") or stored.get("url", ""),
            token=os.environ.get("STUDIO_TOKEN") or stored.get("token", ""),
            team=os.environ.get("STUDIO_TEAM") or stored.get("team", ""),
        )


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).expanduser()


def read_config() -> dict[str, str]:
    path = config_path()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise StudioError(f"cannot read {path}: {error}") from None
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_config(settings: Settings) -> Path:
    """Save the settings readable by their owner only (the file holds a token)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"url": settings.url, "token": settings.token, "team": settings.team}, indent=2)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    return path


def sha256_of(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
            if progress is not None:
                progress(len(block))
    return digest.hexdigest()


class ProgressReader:
    """A file as httpx reads it for a multipart body, calling ``progress`` with each chunk's size.
    ``fileno`` is the file's, so httpx sends a Content-Length (the server needs one)."""

    def __init__(self, handle: IO[bytes], progress: Callable[[int], None]) -> None:
        self._handle = handle
        self._progress = progress

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        self._progress(len(block))
        return block

    def fileno(self) -> int:
        return self._handle.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()


class StudioClient:
    """One method per REST operation ``studio`` uses; every error becomes a StudioError."""

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None) -> None:
        if not settings.url:
            raise StudioError("no server: run `studio login --url URL` or set STUDIO_URL")
        if not settings.token:
            raise StudioError("no token: run `studio login` or set STUDIO_TOKEN")
        self.settings = settings
        self._http = httpx.Client(
            base_url=settings.url.rstrip("/") + API_ROOT,
            headers={"Authorization": f"Bearer {settings.token}"},
            timeout=httpx.Timeout(60.0, connect=10.0),
            transport=transport,
        )

    def team_path(self, path: str) -> str:
        if not self.settings.team:
            raise StudioError("no team: pass --team, run `studio login --team SLUG` or set STUDIO_TEAM")
        return f"/t/{self.settings.team}{path}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise StudioError(f"cannot reach {self.settings.url}: {error}") from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text[:300]}
            raise StudioError(
                str(body.get("error", response.reason_phrase)), response.status_code, body.get("field")
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def team_call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """The object a call on one of the team's paths answers (most operations)."""
        result: dict[str, Any] = self.call(method, self.team_path(path), **kwargs)
        return result

    # -- the operations -----------------------------------------------------------------------

    def whoami(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call("GET", "/tokens")
        return result

    def find_dataset(self, sha256: str) -> dict[str, Any] | None:
        page = self.team_call("GET", "/datasets", params={"sha256": sha256})
        return page["items"][0] if page["items"] else None

    def upload_dataset(self, path: Path, name: str, progress: Callable[[int], None]) -> dict[str, Any]:
        with path.open("rb") as handle:
            files = {"file": (path.name, ProgressReader(handle, progress), "application/vnd.apache.parquet")}
            data = {"name": name} if name else {}
            # The server validates before it answers: a large file takes a while after the last byte.
            return self.team_call("POST", "/datasets", files=files, data=data, timeout=None)

    def create_experiment(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", "/experiments", json=body)

    def launch(self, experiment_id: int) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.call(
            "POST", self.team_path(f"/experiments/{experiment_id}/launch")
        )
        return result

    def fork(self, run_id: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", f"/runs/{run_id}/fork", json=body)

    def runs(self, **filters: Any) -> dict[str, Any]:
        chosen = {k: v for k, v in filters.items() if v not in (None, "")}
        return self.team_call("GET", "/runs", params=chosen)

    def run(self, run_id: int) -> dict[str, Any]:
        return self.team_call("GET", f"/runs/{run_id}")

    def cancel(self, run_id: int) -> dict[str, Any]:
        return self.team_call("POST", f"/runs/{run_id}/cancel")

    def resume(self, run_id: int) -> dict[str, Any]:
        return self.team_call("POST", f"/runs/{run_id}/resume")

    def logs(self, run_id: int, after: int = -1) -> dict[str, Any]:
        return self.team_call("GET", f"/runs/{run_id}/logs", params={"after": after})

    def curve(self, run_id: int, key: str) -> dict[str, Any]:
        series = self.team_call("GET", f"/runs/{run_id}/metrics/curve", params={"keys": key})
        result: dict[str, Any] = series["series"][0]
        return result

    def compare_runs(self, run_ids: Sequence[int], baseline: int | None, every: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"runs": list(run_ids), "all": every}
        if baseline is not None:
            params["baseline"] = baseline
        return self.team_call("GET", "/runs/compare", params=params)

    def histogram(self, run_id: int, measure: str, step: int | None, heat_map: bool) -> dict[str, Any]:
        path = f"/runs/{run_id}/histograms/{measure}" + ("/heatmap" if heat_map else "")
        return self.team_call("GET", path, params={} if step is None else {"step": step})

    def prompt_rollouts(self, sample: int, sides: Sequence[str], rollout: int = 0) -> dict[str, Any]:
        return self.team_call(
            "GET", f"/prompts/{sample}/rollouts", params={"sides": list(sides), "rollout": rollout}
        )

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return self.team_call("GET", f"/experiments/{experiment_id}")

    def sweeps(self, page: int = 1) -> dict[str, Any]:
        return self.team_call("GET", "/sweeps", params={"page": page})

    def create_sweep(self, spec: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", "/sweeps", json=spec)

    def sweep(self, sweep_id: int) -> dict[str, Any]:
        return self.team_call("GET", f"/sweeps/{sweep_id}")

    def cancel_sweep(self, sweep_id: int) -> dict[str, Any]:
        return self.team_call("POST", f"/sweeps/{sweep_id}/cancel")

    def annotate(self, run_id: int, uid: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call(
            "POST", f"/runs/{run_id}/trajectories/{quote(uid, safe='')}/annotations", json=body
        )

    def build_queue(self, run_id: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", f"/runs/{run_id}/queues", json=body)

    def queue(self, queue_id: int) -> dict[str, Any]:
        return self.team_call("GET", f"/queues/{queue_id}")

    def export_queue(self, queue_id: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", f"/queues/{queue_id}/dataset", json=body)

    def import_run(
        self, dumps: list[Path], metrics: Path | None, experiment: str, name: str, every_s: float = 1.0
    ) -> dict[str, Any]:
        """Upload the files, then follow the import's job until it is done: ``{"run", "format",
        "trajectories", "points", "steps"}``; StudioError with the job's reason when it failed."""
        job = self.start_import(dumps, metrics, experiment, name)
        while job["status"] not in JOB_FINISHED:
            time.sleep(every_s)
            job = self.team_call("GET", f"/imports/{job['id']}")
        if job["status"] != "done":
            raise StudioError(f"the import failed: {job['message']}", 400, "dump")
        return {"run": job["run"], **job["result"]}

    def start_import(
        self, dumps: list[Path], metrics: Path | None, experiment: str, name: str
    ) -> dict[str, Any]:
        handles = [path.open("rb") for path in dumps]
        metrics_handle = metrics.open("rb") if metrics else None
        try:
            files: list[tuple[str, tuple[str, Any, str]]] = [
                ("dump", (path.name, handle, "application/x-ndjson"))
                for path, handle in zip(dumps, handles, strict=True)
            ]
            if metrics is not None and metrics_handle is not None:
                files.append(("metrics", (metrics.name, metrics_handle, "application/x-ndjson")))
            data = {"experiment": experiment, "name": name}
            return self.team_call("POST", "/imports", files=files, data=data, timeout=None)
        finally:
            for handle in [*handles, *([metrics_handle] if metrics_handle else [])]:
                handle.close()

    def export_checkpoint(
        self, run_id: int, step: int, merge_lora: bool, every_s: float = 1.0
    ) -> dict[str, Any]:
        """Start the export of a checkpoint and follow its job until the folder is written
        (docs/checkpoints.md#export); StudioError with the job's reason when it failed."""
        path = f"/runs/{run_id}/checkpoints/{step}/export"
        job = self.team_call("POST", path, json={"merge_lora": merge_lora})
        while job["status"] not in JOB_FINISHED:
            time.sleep(every_s)
            job = self.team_call("GET", f"/exports/{job['id']}")
        if job["status"] != "done":
            raise StudioError(f"the export failed: {job['message']}", 400)
        return job

    def download_export(self, job_id: int, target: Path) -> int:
        """Save the export's zip at ``target``, streamed; the bytes written."""
        written = 0
        try:
            with self._http.stream("GET", self.team_path(f"/exports/{job_id}/download")) as response:
                if response.status_code >= 400:
                    raise StudioError(
                        f"the export cannot be downloaded ({response.status_code})", response.status_code
                    )
                with target.open("wb") as out:
                    for chunk in response.iter_bytes():
                        written += out.write(chunk)
        except httpx.HTTPError as error:
            raise StudioError(f"cannot reach {self.settings.url}: {error}") from None
        return written

    def open_sdk_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Make or resume the SDK's run: ``{"run", "token", "claimant", "resumed"}`` (docs/sdk.md)."""
        return self.team_call("POST", SDK_OPEN_PATH, json=body)

    def sdk_meta(self, run_id: int, body: dict[str, Any]) -> dict[str, Any]:
        return self.team_call("POST", SDK_META_PATH.format(run_id=run_id), json=body)

    def watch(
        self, run_id: int, key: str, every_s: float = 2.0
    ) -> Iterator[tuple[dict[str, Any], list[float]]]:
        """(the run, the values of ``key`` so far) now and after each change, until it finishes."""
        seen: tuple[Any, ...] = ()
        while True:
            run = self.run(run_id)
            values = self.curve(run_id, key)["value"]
            state = (run["status"], run["step"], len(values))
            if state != seen:
                seen = state
                yield run, values
            if run["status"] in FINISHED:
                return
            time.sleep(every_s)
