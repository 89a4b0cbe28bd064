"""Lookup data: questions about keys of a table that only the lookup service can read.

Without ``--input`` the keys are drawn from the table of ``--seed`` (``--size`` of them); ``--input``
takes a JSON Lines file of ``{"key"}`` items (or a folder with ``keys.jsonl``, as our fixtures are),
answered from the same table.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.common import Row, make_row, read_json_records, split_off, write_splits
from tasks_lib.demo_rules import Plan, PlannedCall, answer_with_last_result, extra_info
from tasks_lib.demo_rules import Row as RuleRow
from tasks_lib.lookup import prompts
from tasks_lib.lookup.table import TABLE_SIZE, table
from tasks_lib.registry import PrepareOptions

DATA_SOURCE = "lookup"
FIXTURES = Path(__file__).parent / "fixtures"
ENV_KWARGS = {"env_type": "tool", "tools": ["lookup"]}
DEFAULT_SIZE = 400


@dataclass(frozen=True)
class Item:
    key: str
    value: str


def generate(count: int, *, seed: int = 0) -> list[Item]:
    """``count`` distinct keys of the table of ``seed`` with their values; the same for a seed."""
    if count > TABLE_SIZE:
        raise ValueError(f"the table holds {TABLE_SIZE} keys; ask for at most that many")
    entries = table(seed)
    keys = random.Random(seed).sample(sorted(entries), count)
    return [Item(key, entries[key]) for key in keys]


def read_items(path: Path, seed: int) -> list[Item]:
    entries = table(seed)
    items = []
    for record in read_json_records(path):
        key = str(record.get("key", ""))
        if key not in entries:
            raise ValueError(f"{path}: the key {key!r} is not in the table of seed {seed}")
        items.append(Item(key, entries[key]))
    return items


def to_rows(items: list[Item], split: str, start_index: int, seed: int) -> list[Row]:
    return [
        make_row(
            data_source=DATA_SOURCE,
            messages=prompts.messages(item.key),
            ground_truth=item.value,
            index=start_index + offset,
            split=split,
            ability="lookup",
            env_kwargs=ENV_KWARGS,
            tools_kwargs={"lookup": {"table": seed}},
            extra={"key": item.key},
        )
        for offset, item in enumerate(items)
    ]


def prepare(source: Path | None, output: Path, options: PrepareOptions) -> dict[str, Path]:
    """Draw (or read) the keys and write train/val parquet files."""
    if source is None:
        items = generate(options.size or DEFAULT_SIZE, seed=options.seed)
    else:
        items = read_items(source / "keys.jsonl" if source.is_dir() else source, options.seed)
    train, val = split_off(items, options.val_fraction, options.seed)
    splits = {
        "train": to_rows(train, "train", 0, options.seed),
        "val": to_rows(val, "val", len(train), options.seed),
    }
    return write_splits(splits, output, limit=options.limit)


def demonstrate(row: RuleRow) -> Plan | None:
    """Look the row's key up, answer with the value (docs/demonstrations.md#rules)."""
    key = extra_info(row).get("key")
    if not key:
        return None
    return Plan([PlannedCall("lookup", {"key": str(key)})], answer_with_last_result)
