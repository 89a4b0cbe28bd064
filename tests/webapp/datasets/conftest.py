"""Parquet files in the data contract, written by the tests themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# "exact" is a reward function the trainer registers itself, so these rows validate without a recipe.
DATA_SOURCE = "exact"


def contract_row(index: int, question: str | None = None, answer: str | None = None) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [
            {"role": "system", "content": "You are a careful calculator."},
            {"role": "user", "content": question or f"What is {index} + {index}?"},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer or str(2 * index)},
        "extra_info": {"index": index, "split": "train"},
    }


def write_parquet(path: Path, rows: list[dict[str, Any]], *, row_group_size: int | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


@pytest.fixture
def good_parquet(tmp_path: Path) -> Path:
    rows = [contract_row(i) for i in range(25)]
    # Markup in a prompt must be shown as text, never interpreted.
    rows[0] = contract_row(
        0, question="Is <b>bold</b> & <script>alert(1)</script> escaped?", answer="<i>yes</i>"
    )
    return write_parquet(tmp_path / "arith.parquet", rows, row_group_size=7)


@pytest.fixture
def bad_role_parquet(tmp_path: Path) -> Path:
    """Row 3's second message has a role no chat template knows: the validator names row 3 and its column."""
    rows = [contract_row(i) for i in range(5)]
    rows[3]["prompt"][1]["role"] = "wizard"
    return write_parquet(tmp_path / "bad-role.parquet", rows)
