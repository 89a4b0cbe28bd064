"""Our experiments and runs in the JSON shapes of MLflow's protos (service.proto: Experiment,
RunInfo, RunData), which the client parses strictly: only proto fields, int64 times in ms."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from webapp.experiments.models import Experiment, LoggedValue, Run, RunStatus
from webapp.ingestion import metrics_store
from webapp.mlflow_api.errors import invalid
from webapp.mlflow_api.models import DeletedRun, RunDataset
from webapp.mlflow_api.validation import finite_or_name

RUN_NAME_TAG = "mlflow.runName"
USER_TAG = "mlflow.user"
# MLflow's client sends the mlflow.user tag as the run's user id, else this.
UNKNOWN_USER = "unknown"
ACTIVE, DELETED = "active", "deleted"

# Ours → MLflow's RunStatus names.
MLFLOW_STATUS = {
    RunStatus.DRAFT: "SCHEDULED",
    RunStatus.QUEUED: "SCHEDULED",
    RunStatus.STARTING: "SCHEDULED",
    RunStatus.RUNNING: "RUNNING",
    RunStatus.STALLED: "RUNNING",
    RunStatus.SUCCEEDED: "FINISHED",
    RunStatus.FAILED: "FAILED",
    RunStatus.CANCELLED: "KILLED",
}
# MLflow's → ours, for external runs (update-run).
OUR_STATUS = {
    "SCHEDULED": RunStatus.QUEUED,
    "RUNNING": RunStatus.RUNNING,
    "FINISHED": RunStatus.SUCCEEDED,
    "FAILED": RunStatus.FAILED,
    "KILLED": RunStatus.CANCELLED,
}


def ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def from_ms(value: int | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise invalid(f"Invalid time {value}: expected Unix milliseconds between 0 and year 9999") from None


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def experiment(found: Experiment) -> dict[str, Any]:
    """With its MLflow tags and lifecycle (prefetch ``mlflow_tags`` and select ``mlflow_deleted``
    for a list)."""
    created = ms(found.created)
    answer = {
        "experiment_id": str(found.pk),
        "name": found.name,
        "artifact_location": f"mlflow-artifacts:/{found.pk}",
        "lifecycle_stage": DELETED if hasattr(found, "mlflow_deleted") else ACTIVE,
        "creation_time": created,
        "last_update_time": created,
    }
    tags = [{"key": tag.key, "value": tag.value} for tag in found.mlflow_tags.all()]
    return {**answer, "tags": tags} if tags else answer


def run_info(run: Run, user_id: str = UNKNOWN_USER, deleted: bool = False) -> dict[str, Any]:
    return _drop_none(
        {
            "run_id": run.mlflow_run_id,
            "run_uuid": run.mlflow_run_id,
            "run_name": display_name(run),
            "experiment_id": str(run.experiment_id),
            "user_id": user_id,
            "status": MLFLOW_STATUS[RunStatus(run.status)],
            "start_time": ms(run.started_at or run.created),
            "end_time": ms(run.finished_at),
            "artifact_uri": f"mlflow-artifacts:/{run.experiment_id}/{run.mlflow_run_id}/artifacts",
            "lifecycle_stage": DELETED if deleted else ACTIVE,
        }
    )


def display_name(run: Run) -> str:
    return run.name or f"run-{run.pk}"


def runs(found: Iterable[Run]) -> list[dict[str, Any]]:
    """Runs with their data (latest metrics, params, tags), in three queries for the whole list."""
    found = list(found)
    ids = [run.pk for run in found]
    logged = LoggedValue.objects.filter(run_id__in=ids)
    params = _by_run(logged.params().values_list("run_id", "key", "value"))
    tags = _by_run(logged.tags().values_list("run_id", "key", "value"))
    metrics = _latest_metrics(ids)
    deleted = set(DeletedRun.objects.filter(run_id__in=ids).values_list("run_id", flat=True))
    inputs = _dataset_inputs(ids)
    out = []
    for run in found:
        run_tags = [{"key": k, "value": v} for k, v in tags.get(run.pk, [])]
        run_tags.append({"key": RUN_NAME_TAG, "value": display_name(run)})
        user = next((t["value"] for t in run_tags if t["key"] == USER_TAG), UNKNOWN_USER)
        data = {
            "metrics": metrics.get(run.pk, []),
            "params": [{"key": k, "value": v} for k, v in params.get(run.pk, [])],
            "tags": run_tags,
        }
        run_inputs = {"dataset_inputs": inputs[run.pk]} if run.pk in inputs else {}
        out.append({"info": run_info(run, user, run.pk in deleted), "data": data, "inputs": run_inputs})
    return out


def _dataset_inputs(run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = {}
    for found in RunDataset.objects.filter(run_id__in=run_ids):
        fields = ("name", "digest", "source_type", "source", "schema", "profile")
        dataset = {name: getattr(found, name) for name in fields if getattr(found, name)}
        tags = [{"key": k, "value": v} for k, v in found.tags.items()]
        grouped.setdefault(found.run_id, []).append({"tags": tags, "dataset": dataset})
    return grouped


def _by_run(rows: Iterable[tuple[int, str, str]]) -> dict[int, list[tuple[str, str]]]:
    grouped: dict[int, list[tuple[str, str]]] = {}
    for run_id, key, value in rows:
        grouped.setdefault(run_id, []).append((key, value))
    return grouped


def _latest_metrics(run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    latest = metrics_store.latest_points(run_ids)
    return {run_id: [metric(*point) for point in points] for run_id, points in latest.items()}


def metric(key: str, value: float, ts: float, step: int) -> dict[str, Any]:
    return {"key": key, "value": finite_or_name(value), "timestamp": round(ts * 1000), "step": step}
