"""Dataset rows for the torch backend: parquet files in the data contract, read with pyarrow
(docs/contract.md#the-data-contract)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq

Row = dict[str, Any]
Item = TypeVar("Item")

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")


def load_rows(path: str | Path, *, limit: int | None = None) -> list[Row]:
    """Read a parquet file into plain dict rows, checking the columns every row must have."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"dataset {file} does not exist")
    table = pq.read_table(file)
    missing = [column for column in REQUIRED_COLUMNS if column not in table.column_names]
    if missing:
        raise ValueError(
            f"dataset {file} lacks column(s) {', '.join(missing)}; "
            "see the data contract in docs/contract.md#the-data-contract"
        )
    rows: list[Row] = table.to_pylist()
    for number, row in enumerate(rows):
        extra_info = row.get("extra_info") or {}
        if extra_info.get("index") is None:
            raise ValueError(
                f"dataset {file} row {number}: extra_info.index is missing; every row needs a unique index"
            )
    if not rows:
        raise ValueError(f"dataset {file} has no rows")
    return rows[:limit] if limit is not None else rows


def epoch_order(num_rows: int, epoch: int, *, seed: int, shuffle: bool) -> list[int]:
    """Row order for one pass over the data; a pure function of (seed, epoch) so a resumed run repeats it."""
    order = list(range(num_rows))
    if shuffle:
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def batch_for_step(
    rows: Sequence[Item], step: int, batch_size: int, *, seed: int, shuffle: bool
) -> list[Item]:
    """The prompts of training step ``step`` (1-based): consecutive slices of the epoch orders, wrapping
    into the next epoch when the data runs out. Knowing only the step number is enough, so resume needs
    no saved data-loader state."""
    start = (step - 1) * batch_size
    orders: dict[int, list[int]] = {}
    batch: list[Item] = []
    for position in range(start, start + batch_size):
        epoch, offset = divmod(position, len(rows))
        if epoch not in orders:
            orders[epoch] = epoch_order(len(rows), epoch, seed=seed, shuffle=shuffle)
        batch.append(rows[orders[epoch][offset]])
    return batch
