"""Fixtures for the torch backend tests: tiny random models with SmolLM2's real tokenizer, parquet rows."""

from __future__ import annotations

import os

# Before torch loads OpenMP: on a shared machine, spinning worker threads that lose their core make
# torch ten times slower; passive waiting keeps two threads as fast as one at worst.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def _two_threads() -> Iterator[None]:
    # The machine is shared: trainer tests keep to two cores.
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: Any) -> Path:
    """A 2-layer, 64-wide random Llama with SmolLM2's vocabulary and chat template."""
    from trainer.models import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny") / "model", smol_tokenizer, seed=0)


@pytest.fixture(scope="session")
def sharp_tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: Any) -> Path:
    """Like ``tiny_model_dir`` with a larger init: a peaked next-token distribution that RL can sharpen fast."""
    from trainer.models import tiny_model

    return tiny_model(tmp_path_factory.mktemp("sharp") / "model", smol_tokenizer, seed=0, init_std=0.2)


RowsFactory = Callable[..., Path]


@pytest.fixture
def rows_file(tmp_path: Path) -> RowsFactory:
    """``rows_file(name, count, data_source, text=..., **columns)``: chat rows in the data contract, as parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(
        name: str, count: int, data_source: str, *, text: str = "Say something #{i}", **columns: Any
    ) -> Path:
        ground_truth = columns.pop("ground_truth", "")
        rows = [
            {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": text.format(i=i)}],
                "reward_model": {"style": "rule", "ground_truth": ground_truth},
                "extra_info": {"index": i},
                **columns,
            }
            for i in range(count)
        ]
        path = tmp_path / name
        pq.write_table(pa.Table.from_pylist(rows), path)
        return path

    return write
