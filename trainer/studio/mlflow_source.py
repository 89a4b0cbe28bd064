"""An MLflow tracking server's runs to import, read through its REST API (docs/importers.md#mlflow):
no mlflow package needed. Each run brings its params, tags, every metric's full history (every
step, paged) and its artifacts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx

from trainer.studio.client import StudioError
from trainer.studio.import_target import Point, SourceRun

RUNS_PAGE = 1000
HISTORY_PAGE = 25000  # MLflow's most per get-history page
PROXIED = "mlflow-artifacts:"


class MlflowSource:
    def __init__(self, uri: str, token: str = "", *, transport: httpx.BaseTransport | None = None) -> None:
        self.uri = uri.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            headers=headers, timeout=httpx.Timeout(120.0, connect=10.0), transport=transport
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, f"{self.uri}/{path}", **kwargs)
        except httpx.HTTPError as error:
            raise StudioError(f"cannot reach the MLflow server {self.uri}: {error}") from None
        if response.status_code >= 400:
            raise StudioError(f"the MLflow server answered {response.status_code}: {response.text[:300]}", 1)
        return response

    def get(self, path: str, params: dict[str, Any]) -> httpx.Response:
        return self.request("GET", path, params=params)

    def call(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.get(f"api/2.0/mlflow/{endpoint}", params).json()
        return answer

    def experiments(self, names: tuple[str, ...]) -> list[dict[str, Any]]:
        """The named experiments, or every active one."""
        if names:
            return [self.call("experiments/get-by-name", {"experiment_name": n})["experiment"] for n in names]
        found: list[dict[str, Any]] = []
        token = None
        while True:
            params = {"max_results": RUNS_PAGE, **({"page_token": token} if token else {})}
            page = self.call("experiments/search", params)
            found += page.get("experiments", [])
            token = page.get("next_page_token")
            if not token:
                return found

    def runs(self, experiment_id: str) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            params = {"experiment_ids": [experiment_id], "max_results": RUNS_PAGE}
            page = self._search(params | ({"page_token": token} if token else {}))
            yield from page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                return

    def _search(self, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("POST", "api/2.0/mlflow/runs/search", json=body).json()
        return answer

    def history(self, run_id: str, key: str) -> list[Point]:
        points: list[Point] = []
        token = None
        while True:
            params = {"run_id": run_id, "metric_key": key, "max_results": HISTORY_PAGE}
            page = self.call("metrics/get-history", params | ({"page_token": token} if token else {}))
            points += [_point(m) for m in page.get("metrics", [])]
            token = page.get("next_page_token")
            if not token:
                return points

    def artifact_paths(self, run_id: str, folder: str = "") -> list[str]:
        """Every file of the run, depth first."""
        params = {"run_id": run_id, **({"path": folder} if folder else {})}
        files: list[str] = []
        for entry in self.call("artifacts/list", params).get("files", []):
            if entry.get("is_dir"):
                files += self.artifact_paths(run_id, entry["path"])
            else:
                files.append(entry["path"])
        return files

    def artifact(self, info: dict[str, Any], path: str) -> Callable[[], bytes]:
        """The file's bytes, read when called: through the server's artifact proxy when it serves the
        run's artifacts, else its get-artifact route."""
        uri = info.get("artifact_uri", "")
        if uri.startswith(PROXIED):
            where = uri[len(PROXIED) :].strip("/")
            return lambda: self.get(f"api/2.0/mlflow-artifacts/artifacts/{where}/{path}", {}).content
        return lambda: self.get("get-artifact", {"path": path, "run_uuid": info["run_id"]}).content

    def source_of(self, run: dict[str, Any]) -> str:
        return f"mlflow:{self.uri}/{run['info']['run_id']}"

    def read_run(self, run: dict[str, Any]) -> SourceRun:
        info, data = run["info"], run.get("data", {})
        keys = sorted({m["key"] for m in data.get("metrics", [])})
        return SourceRun(
            source=self.source_of(run),
            name=info.get("run_name") or info["run_id"],
            start_ms=int(info.get("start_time") or 0),
            end_ms=int(info.get("end_time") or info.get("start_time") or 0),
            status=info.get("status")
            if info.get("status") in ("FINISHED", "FAILED", "KILLED")
            else "FINISHED",
            params={p["key"]: p.get("value", "") for p in data.get("params", [])},
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
            points=[point for key in keys for point in self.history(info["run_id"], key)],
            artifacts=[(path, self.artifact(info, path)) for path in self.artifact_paths(info["run_id"])],
        )


def _point(metric: dict[str, Any]) -> Point:
    return Point(
        metric["key"], float(metric["value"]), int(metric.get("timestamp", 0)), int(metric.get("step", 0))
    )
