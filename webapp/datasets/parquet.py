"""Reading stored dataset files: validation through the shared validator, stats, preview pages.

Everything here reads a file a row group or a batch at a time, so a multi-GB dataset never has
to fit in memory; only one number per row (the prompt length) is kept for the histogram.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from tasks_lib.validate import open_parquet
from trainer.contract import MESSAGES_KEY, is_messages_layout

HISTOGRAM_BINS = 20
_STATS_BATCH_ROWS = 4096


def problems_in(path: Path, context: Any = None) -> list[dict[str, Any]]:
    """The shared validator's problems as JSON-ready dicts: row (or None), column (or None), message,
    and for a cause shared by several rows ``where`` ("rows 0-29 (30 rows)") and ``count``;
    ``data_source`` names a value that only needs a reward mapping."""
    from tasks_lib.validate import validate

    try:
        problems = validate(path, context=context)
    except (OSError, pa.ArrowException) as exc:
        # The validator reports unreadable files itself; this catches what it did not foresee.
        return [{"row": None, "column": None, "message": f"cannot read the file as parquet: {exc}"}]
    return [_problem_dict(problem) for problem in problems]


def _problem_dict(problem: Any) -> dict[str, Any]:
    return {
        "row": problem.row,
        "column": problem.column,
        "message": str(problem.message),
        "where": problem.where,
        "count": problem.count or (1 if problem.row is not None else 0),
        "data_source": problem.data_source,
    }


def prompt_length(prompt: Any) -> int:
    """Characters of message content in one prompt (a tokenizer-free measure every dataset shares)."""
    if not isinstance(prompt, list):
        return 0
    return sum(len(str(message.get("content") or "")) for message in prompt if isinstance(message, dict))


def compute_stats(path: Path) -> dict[str, Any]:
    """Rows, rows per data source, and a prompt-length histogram, in one pass over two columns."""
    parquet = open_parquet(path)
    if is_messages_layout(parquet.schema_arrow.names):
        return _conversation_stats(parquet)
    sources: Counter[str] = Counter()
    agents: Counter[str] = Counter()
    lengths = array("q")
    columns = ["data_source", "prompt"] + (
        ["agent_name"] if "agent_name" in parquet.schema_arrow.names else []
    )
    for batch in parquet.iter_batches(batch_size=_STATS_BATCH_ROWS, columns=columns):
        sources.update(str(source) for source in batch.column("data_source").to_pylist())
        lengths.extend(prompt_length(prompt) for prompt in batch.column("prompt").to_pylist())
        names = batch.column("agent_name").to_pylist() if "agent_name" in columns else [None] * batch.num_rows
        agents.update(str(name or "") for name in names)
    return {
        "rows": parquet.metadata.num_rows,
        "data_sources": dict(sources.most_common()),
        "agent_names": dict(agents.most_common()),
        "prompt_length": histogram(lengths),
    }


def _conversation_stats(parquet: Any) -> dict[str, Any]:
    """A demonstrations file's rows and conversation lengths (docs/sft.md#demonstrations): it has no
    data source, so it fits every task."""
    lengths = array("q")
    for batch in parquet.iter_batches(batch_size=_STATS_BATCH_ROWS, columns=[MESSAGES_KEY]):
        lengths.extend(prompt_length(messages) for messages in batch.column(MESSAGES_KEY).to_pylist())
    return {
        "rows": parquet.metadata.num_rows,
        "data_sources": {},
        "agent_names": {},
        "prompt_length": histogram(lengths),
        "layout": MESSAGES_KEY,
    }


def histogram(values: array[int], bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Equal-width integer bins from min to max; ``edges`` has one more entry than ``counts``."""
    if not values:
        return {"edges": [], "counts": [], "min": 0, "max": 0}
    low, high = min(values), max(values)
    width = max(1, math.ceil((high - low + 1) / bins))
    counts = [0] * math.ceil((high - low + 1) / width)
    for value in values:
        counts[(value - low) // width] += 1
    edges = [low + i * width for i in range(len(counts) + 1)]
    return {"edges": edges, "counts": counts, "min": low, "max": high}


@dataclass(frozen=True)
class PreviewRow:
    """One row as the preview shows it; every text is rendered escaped by the template."""

    number: int
    data_source: str
    ability: str
    messages: list[dict[str, str]]
    ground_truth: str
    index: str
    agent_name: str


def read_rows(path: Path, start: int, count: int) -> list[PreviewRow]:
    """Rows ``start`` .. ``start + count - 1``, reading only the row groups that hold them."""
    parquet = open_parquet(path)
    tables, offset = [], 0
    for group in range(parquet.num_row_groups):
        rows_in_group = parquet.metadata.row_group(group).num_rows
        if offset + rows_in_group > start and offset < start + count:
            table = parquet.read_row_group(group)
            tables.append(table.slice(max(0, start - offset), start + count - max(start, offset)))
        offset += rows_in_group
    records = [record for table in tables for record in table.to_pylist()]
    return [_preview_row(start + i, record) for i, record in enumerate(records[:count])]


def _preview_row(number: int, record: dict[str, Any]) -> PreviewRow:
    reward_model = record.get("reward_model") or {}
    extra_info = record.get("extra_info") or {}
    prompt = record.get("prompt") or record.get(MESSAGES_KEY) or []  # a demonstration: its conversation
    messages = [
        {"role": str(message.get("role", "")), "content": _text(message.get("content"))}
        for message in prompt
        if isinstance(message, dict)
    ]
    return PreviewRow(
        number=number,
        data_source=_text(record.get("data_source")),
        ability=_text(record.get("ability")),
        messages=messages,
        ground_truth=_text(reward_model.get("ground_truth") if isinstance(reward_model, dict) else None),
        index=_text(extra_info.get("index") if isinstance(extra_info, dict) else None),
        agent_name=_text(record.get("agent_name")),
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
