"""Parquet files in the data contract, written by the tests themselves; the lookup recipe's rows as a
dataset, and a team's key → value service on loopback to look their keys up."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.test import Client

from tasks_lib import PrepareOptions, load_recipes
from tasks_lib.lookup.table import table
from tests.webapp.tools.conftest import allow_tools_at
from webapp.datasets import files
from webapp.datasets.models import Dataset, DatasetStatus

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


@dataclass
class KeyValueServer:
    """A team's own key → value service: answers the lookup table of seed 0, counts its calls."""

    url: str = ""
    keys: list[str] = field(default_factory=list)


@pytest.fixture
def kv_server(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyValueServer]:
    server = KeyValueServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            key = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))["key"]
            server.keys.append(key)
            value = table(0).get(key)
            payload = json.dumps({"text": value} if value else {"error": "no such key"}).encode()
            self.send_response(200 if value else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}/kv"
    allow_tools_at(settings, monkeypatch, f"127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def lookup_dataset(team: Any, tmp_path: Path, *, missing_key: bool = True) -> Dataset:
    """The lookup recipe's fixture rows as a valid dataset; with ``missing_key``, row 0 asks for a
    key the table lacks."""
    written = (
        load_recipes()
        .get("lookup")
        .prepare(load_recipes().get("lookup").fixtures, tmp_path / "prepared", PrepareOptions())
    )
    rows = pq.read_table(written["train"]).to_pylist()
    if missing_key:
        rows[0]["extra_info"]["key"] = "no-such-key"
    path = tmp_path / "lookup.parquet"
    pq.write_table(pq.read_table(written["train"]).from_pylist(rows), path)
    dataset, _ = Dataset.from_file(
        team, path, sha256=files.sha256_of(path), name="lookup train", source="test", validate_later=False
    )
    dataset.validate()
    assert dataset.status == DatasetStatus.VALID, dataset.problems
    return dataset


def api(client: Client, method: str, path: str, token: str, body: Any = None) -> Any:
    call = getattr(client, method)
    if body is None:
        return call(path, HTTP_AUTHORIZATION=f"Bearer {token}")
    return call(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
