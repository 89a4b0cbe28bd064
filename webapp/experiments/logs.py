"""The log tail on a run page: what the trainer sent over the API, else what its executor kept."""

from __future__ import annotations

from webapp.experiments.executors import executor_of
from webapp.experiments.models import Run

TAIL_BYTES = 20_000


def log_tail(run: Run, max_bytes: int = TAIL_BYTES) -> str:
    return _ingested_tail(run, max_bytes) or executor_of(run).log_tail(run, max_bytes)


def _ingested_tail(run: Run, max_bytes: int) -> str:
    # Read through the run's relation to the chunks ingestion stores (docs/architecture.md#layers).
    chunks = list(run.log_chunks.order_by("-seq").values_list("text", flat=True)[:200])
    return "".join(reversed(chunks))[-max_bytes:]
