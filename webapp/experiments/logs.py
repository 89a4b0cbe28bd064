"""The log tail on a run page: what the trainer sent over the API, else what its executor kept."""

from __future__ import annotations

import logging

from webapp.experiments.executors import run_dir
from webapp.experiments.models import Run

logger = logging.getLogger(__name__)
TAIL_BYTES = 20_000


def log_tail(run: Run, max_bytes: int = TAIL_BYTES) -> str:
    sent = _ingested_tail(run, max_bytes)
    if sent:
        return sent
    if run.executor == "local":
        return _file_tail(run, max_bytes)
    if run.executor == "ray" and run.executor_ref:
        return _ray_tail(run, max_bytes)
    return ""


def _ingested_tail(run: Run, max_bytes: int) -> str:
    # Read through the run's relation to the chunks ingestion stores (docs/architecture.md#layers).
    chunks = list(run.log_chunks.order_by("-seq").values_list("text", flat=True)[:200])
    return "".join(reversed(chunks))[-max_bytes:]


def _file_tail(run: Run, max_bytes: int) -> str:
    path = run_dir(run) / "train.log"
    if not path.exists():
        return ""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - max_bytes))
        return handle.read().decode("utf-8", errors="replace")


def _ray_tail(run: Run, max_bytes: int) -> str:
    from webapp.experiments.executors import EXECUTORS, RayExecutor

    executor = EXECUTORS.get("ray")
    if not isinstance(executor, RayExecutor):
        return ""
    try:
        logs = executor.client().get_job_logs(run.executor_ref.removeprefix("ray:"))  # type: ignore[attr-defined]
    except Exception as exc:  # the cluster may be gone; the page still renders
        logger.info("no ray logs for run %s: %s", run.pk, exc)
        return ""
    return str(logs)[-max_bytes:]
