"""Where `studio import tensorboard|mlflow` writes: the server's MLflow-compatible endpoint, with the
user's token (docs/importers.md). It is the write path every MLflow client takes (webapp/mlflow_api
calls the same Run and ingestion methods as the trainer's routes), so an imported run is an external
run like one an MLflow client logged.

Resuming (docs/importers.md#resuming): each run carries IMPORT_SOURCE_TAG, where it came from. A run
found finished by that tag is skipped; one found unfinished (an import that stopped) is written again
from the start into the same run, and the point store keeps the first value of each (key, step), so
nothing is stored twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from trainer.contract import IMPORT_SOURCE_TAG, MLFLOW_ROOT
from trainer.studio.client import Settings, StudioError

# The endpoint's batch limits (MLflow's own: webapp/mlflow_api/validation.py).
METRICS_PER_BATCH = 1000
PARAMS_TAGS_PER_BATCH = 100
KEY_MAX = 250
VALUE_MAX = 6000  # MLflow's param value limit
_KEY_CHARS = re.compile(r"[^/\w.\- :]")
T = TypeVar("T")


@dataclass(frozen=True)
class Point:
    key: str
    value: float
    timestamp_ms: int
    step: int


@dataclass
class SourceRun:
    """One run as a source holds it, whatever the source."""

    source: str  # IMPORT_SOURCE_TAG's value: unique per run of the source
    name: str
    start_ms: int
    end_ms: int
    status: str = "FINISHED"  # MLflow's: FINISHED, FAILED, KILLED
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    artifacts: list[tuple[str, Callable[[], bytes]]] = field(default_factory=list)  # (path, its bytes)


def metric_key(name: str) -> str:
    """A key the endpoint takes (MLflow's characters: letters, digits, _ - . space : /)."""
    return _KEY_CHARS.sub("_", name)[:KEY_MAX] or "_"


def proto_double(value: float) -> float | str:
    """A double as proto3 JSON writes it: NaN and the infinities as strings (JSON has no such numbers)."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ImportTarget:
    """The team's MLflow-compatible endpoint: one method per call the importers make."""

    def __init__(self, settings: Settings, *, transport: httpx.BaseTransport | None = None) -> None:
        if not (settings.url and settings.token and settings.team):
            raise StudioError("no server, token or team: run `studio login` or set STUDIO_URL/TOKEN/TEAM")
        self.base = f"{settings.url.rstrip('/')}{MLFLOW_ROOT}/t/{settings.team}"
        self._http = httpx.Client(
            headers={"Authorization": f"Bearer {settings.token}"},
            timeout=httpx.Timeout(120.0, connect=10.0),
            transport=transport,
        )

    def call(self, method: str, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base}/api/2.0/mlflow/{endpoint}"
        try:
            if method == "GET":
                response = self._http.get(url, params=body)
            else:
                response = self._http.post(url, json=body)
        except httpx.HTTPError as error:
            raise StudioError(f"cannot reach {self.base}: {error}") from None
        answer: dict[str, Any] = response.json() if response.content else {}
        if response.status_code >= 400:
            status = 0 if response.status_code == 401 else response.status_code
            raise StudioError(str(answer.get("message", response.reason_phrase)), status)
        return answer

    def experiment_id(self, name: str) -> str:
        try:
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(found["experiment"]["experiment_id"])
        except StudioError as error:
            if error.status != 404:
                raise
        return str(self.call("POST", "experiments/create", {"name": name})["experiment_id"])

    def find_run(self, experiment_id: str, source: str) -> dict[str, Any] | None:
        """The run an earlier import of ``source`` made, if any: its MLflow ``info``."""
        quoted = source.replace("\\", "\\\\").replace("'", "\\'")
        body = {
            "experiment_ids": [experiment_id],
            "filter": f"tags.`{IMPORT_SOURCE_TAG}` = '{quoted}'",
            "max_results": 1,
        }
        runs = self.call("POST", "runs/search", body).get("runs", [])
        return runs[0]["info"] if runs else None

    def create_run(self, experiment_id: str, run: SourceRun) -> dict[str, Any]:
        body = {
            "experiment_id": experiment_id,
            "run_name": run.name[:250],
            "start_time": run.start_ms,
            "tags": [{"key": IMPORT_SOURCE_TAG, "value": run.source}],
        }
        info: dict[str, Any] = self.call("POST", "runs/create", body)["run"]["info"]
        return info

    def upload(self, info: dict[str, Any], path: str, content: bytes) -> None:
        where = f"{info['experiment_id']}/{info['run_id']}/artifacts/{path.strip('/')}"
        url = f"{self.base}/api/2.0/mlflow-artifacts/artifacts/{where}"
        try:
            response = self._http.put(url, content=content)
        except httpx.HTTPError as error:
            raise StudioError(f"cannot reach {self.base}: {error}") from None
        if response.status_code >= 400:
            raise StudioError(f"artifact {path}: {response.text[:300]}", response.status_code)

    def finish(self, run_id: str, status: str, end_ms: int) -> None:
        self.call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": end_ms})


@dataclass(frozen=True)
class Written:
    name: str
    run_id: str
    points: int
    skipped: bool  # imported before, finished: nothing read or sent


def import_one(
    target: ImportTarget, experiment_id: str, source: str, read: Callable[[], SourceRun]
) -> Written:
    """The source run ``read`` returns into the team's experiment, unless an earlier import of
    ``source`` finished (then nothing is read)."""
    info = target.find_run(experiment_id, source)
    if info is not None and info.get("status") != "RUNNING":
        return Written(info.get("run_name", ""), info["run_id"], 0, skipped=True)
    run = read()
    info = info or target.create_run(experiment_id, run)
    write_run(target, info, run)
    return Written(run.name, info["run_id"], len(run.points), skipped=False)


def write_run(target: ImportTarget, info: dict[str, Any], run: SourceRun) -> None:
    """Tags, params, every point and the artifacts into the run ``info`` names, then its end."""
    run_id = info["run_id"]
    tags = [
        {"key": k[:KEY_MAX], "value": v[:VALUE_MAX]} for k, v in run.tags.items() if k != IMPORT_SOURCE_TAG
    ]
    params = [{"key": k[:KEY_MAX], "value": v[:VALUE_MAX]} for k, v in run.params.items()]
    metrics = [
        {
            "key": metric_key(p.key),
            "value": proto_double(p.value),
            "timestamp": p.timestamp_ms,
            "step": p.step,
        }
        for p in run.points
    ]
    for kind, items, size in (
        ("tags", tags, PARAMS_TAGS_PER_BATCH),
        ("params", params, PARAMS_TAGS_PER_BATCH),
        ("metrics", metrics, METRICS_PER_BATCH),
    ):
        for batch in chunks(items, size):
            target.call("POST", "runs/log-batch", {"run_id": run_id, kind: list(batch)})
    for path, content in run.artifacts:
        target.upload(info, path, content())
    target.finish(run_id, run.status, run.end_ms)
