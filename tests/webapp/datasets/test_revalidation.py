"""An invalid verdict is not kept for ever: the same bytes uploaded again are validated again, since
what makes a file valid (the registered rewards, the validator) may have been fixed since."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.datasets.conftest import DATA_SOURCE, contract_row, write_parquet
from trainer.rewards import REWARDS
from webapp.datasets import files
from webapp.datasets.models import Dataset, DatasetStatus


def test_an_invalid_upload_is_validated_again_when_the_same_bytes_come_back(
    personas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{**contract_row(i), "data_source": "registered-later"} for i in range(2)]
    original = write_parquet(tmp_path / "rows.parquet", rows)
    sha256 = files.sha256_of(original)

    def upload() -> Dataset:
        incoming = Path(shutil.copy(original, files.incoming_dir() / "upload.parquet"))
        dataset, _ = Dataset.from_file(
            personas["acme"], incoming, sha256=sha256, name="d", source="t", validate_later=False
        )
        dataset.validate()
        dataset.refresh_from_db()
        return dataset

    first = upload()
    assert first.status == DatasetStatus.INVALID
    assert "registered-later" in str(first.problems)
    monkeypatch.setitem(REWARDS._entries, "registered-later", REWARDS.get(DATA_SOURCE))
    second = upload()
    assert (second.pk, second.status, second.problems) == (first.pk, DatasetStatus.VALID, [])
    assert Dataset.objects.count() == 1
