"""What every recipe's ``data.py`` shares: building rows in the data contract and writing parquet splits."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from trainer.contract.wire import json_object

logger = logging.getLogger(__name__)

Row = dict[str, Any]
T = TypeVar("T")

# Rows name files inside a recipe's own fixtures folder relative to it, so they stay valid wherever the
# package is installed (a temporary prepare folder, another machine); other files by absolute path.
FIXTURES_PREFIX = "fixtures:"


def portable_path(path: Path, fixtures: Path) -> str:
    """``fixtures:<relative>`` for a path inside ``fixtures``, else the absolute path."""
    resolved = path.resolve()
    if resolved.is_relative_to(fixtures.resolve()):
        return FIXTURES_PREFIX + resolved.relative_to(fixtures.resolve()).as_posix()
    return str(resolved)


def resolve_path(value: str, fixtures: Path) -> Path:
    """The inverse of :func:`portable_path`."""
    if value.startswith(FIXTURES_PREFIX):
        return fixtures / value[len(FIXTURES_PREFIX) :]
    return Path(value)


def make_row(
    *,
    data_source: str,
    messages: Sequence[Mapping[str, str]],
    ground_truth: Any,
    index: int,
    split: str,
    ability: str = "",
    agent_name: str = "agent_env_loop",
    env_kwargs: Mapping[str, Any] | None = None,
    tools_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Row:
    """One row of the data contract (docs/contract.md#columns). ``env_kwargs`` is written as a JSON string so that rows
    with different settings share one parquet schema."""
    extra_info: dict[str, Any] = {"index": int(index), "split": split, **dict(extra or {})}
    if tools_kwargs:
        extra_info["tools_kwargs"] = {name: dict(kwargs) for name, kwargs in tools_kwargs.items()}
    return {
        "data_source": data_source,
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in messages],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": extra_info,
        "agent_name": agent_name,
        "env_kwargs": json.dumps(dict(env_kwargs or {}), ensure_ascii=False, sort_keys=True),
    }


def write_parquet(rows: Sequence[Row], path: Path) -> Path:
    """Write rows to one parquet file (the parent folder is created)."""
    if not rows:
        raise ValueError(f"refusing to write {path}: no rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(list(rows))
    pq.write_table(table, path)
    logger.info("wrote %d rows to %s", len(rows), path)
    return path


def write_splits(
    splits: Mapping[str, Sequence[Row]], output: Path, *, limit: int | None = None
) -> dict[str, Path]:
    """Write ``<output>/<split>.parquet`` for every non-empty split; ``limit`` caps the rows of each."""
    written: dict[str, Path] = {}
    for split, rows in splits.items():
        kept = list(rows)[:limit] if limit is not None else list(rows)
        if kept:
            written[split] = write_parquet(kept, output / f"{split}.parquet")
    if not written:
        raise ValueError("no rows to write: the input held no usable items")
    return written


def split_off(items: Sequence[T], fraction: float, seed: int) -> tuple[list[T], list[T]]:
    """A seeded shuffle cut into (rest, held-out): the held-out part is ``fraction`` of the items, at least
    one item when there are two or more and the fraction is positive."""
    order = list(items)
    random.Random(seed).shuffle(order)
    held = round(len(order) * fraction)
    if fraction > 0 and len(order) >= 2:
        held = min(max(held, 1), len(order) - 1)
    return order[held:], order[:held]


def read_json_records(path: Path) -> list[dict[str, Any]]:
    """A JSON array of objects or JSON Lines, whichever the file holds."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = json.loads(text)
        if not all(isinstance(item, dict) for item in data):
            raise ValueError(f"{path}: expected a JSON array of objects")
        return list(data)
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        records.append(json_object(line, f"{path} line {number}"))
    return records


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records from JSON, JSON Lines or parquet (Hugging Face dataset dumps are parquet)."""
    if path.suffix == ".parquet":
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        return rows
    return read_json_records(path)
