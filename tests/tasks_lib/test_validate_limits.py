"""A parquet file whose footer claims more than it holds is refused before pyarrow reads it: the
reader would otherwise allocate whatever the footer claims (docs/security.md#limits)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.validate import MAX_FOOTER_BYTES, validate


def _with_footer_length(path: Path, claimed: int) -> None:
    data = bytearray(path.read_bytes())
    data[-8:-4] = claimed.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def test_a_footer_claiming_more_than_the_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "lying.parquet"
    pq.write_table(pa.table({"prompt": ["x"]}), path)
    _with_footer_length(path, 2**20)  # under MAX_FOOTER_BYTES, over the file
    (problem,) = validate(path)
    assert "footer claims 1,048,576 bytes" in str(problem) and "(corrupt file)" in str(problem)


def test_a_footer_over_the_limit_is_refused_and_an_honest_one_passes_the_check(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"prompt": ["x"]}), path)
    assert not any("footer" in str(p) for p in validate(path))  # missing columns, but the footer is fine
    _with_footer_length(path, MAX_FOOTER_BYTES + 1)
    (problem,) = validate(path)
    assert f"more than the {MAX_FOOTER_BYTES // 2**20} MiB it may be" in str(problem)
