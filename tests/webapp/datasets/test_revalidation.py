"""An invalid verdict is not kept for ever: the same bytes uploaded again are validated again, since
what makes a file valid (the registered flows and rewards, the validator) may have been fixed since."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.datasets.conftest import contract_row, write_parquet
from trainer.flows import FLOWS
from webapp.datasets import files
from webapp.datasets.models import Dataset, DatasetStatus


def test_an_invalid_upload_is_validated_again_when_the_same_bytes_come_back(
    personas: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flow no plugin registers yet makes the file invalid (an unrouted data_source would only
    # need a mapping, which the dataset's page fixes without an upload).
    rows = [{**contract_row(i), "agent_name": "registered-later"} for i in range(2)]
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
    monkeypatch.setitem(FLOWS._entries, "registered-later", FLOWS.get(FLOWS.names()[0]))
    second = upload()
    assert (second.pk, second.status, second.problems) == (first.pk, DatasetStatus.VALID, [])
    assert Dataset.objects.count() == 1
