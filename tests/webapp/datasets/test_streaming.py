"""The upload handler writes a large body to disk chunk by chunk: memory stays flat, the hash is right."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIRequest

from webapp.datasets.files import StreamedUpload, StreamingUploadHandler, incoming_dir

BOUNDARY = "studio-test-boundary"
MIB = 2**20


def _multipart_body(path: Path, payload_mib: int) -> str:
    """Write a multipart body with one ``file`` part of random bytes; return the payload's SHA-256."""
    digest = hashlib.sha256()
    block = os.urandom(MIB)
    with path.open("wb") as out:
        out.write(
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.parquet"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n".encode()
        )
        for _ in range(payload_mib):
            out.write(block)
            digest.update(block)
        out.write(f"\r\n--{BOUNDARY}--\r\n".encode())
    return digest.hexdigest()


def _request(body: Path, stream: Any) -> WSGIRequest:
    return WSGIRequest({
        "REQUEST_METHOD": "POST", "PATH_INFO": "/", "SCRIPT_NAME": "", "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "wsgi.input": stream,
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}", "CONTENT_LENGTH": str(body.stat().st_size),
    })  # fmt: skip


def test_a_large_upload_streams_to_disk_with_flat_memory(db: Any, tmp_path: Path) -> None:
    body = tmp_path / "body"
    sha256 = _multipart_body(body, payload_mib=48)
    with body.open("rb") as stream:
        request = _request(body, stream)
        handler = StreamingUploadHandler(request, max_bytes=64 * MIB)
        request.upload_handlers = [handler]
        tracemalloc.start()
        upload = request.FILES["file"]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert isinstance(upload, StreamedUpload)
    assert (upload.sha256, upload.size, upload.path.stat().st_size) == (sha256, 48 * MIB, 48 * MIB)
    assert peak < 4 * MIB, f"parsing a 48 MiB upload held {peak / MIB:.1f} MiB"
    handler.remove_leftover()
    assert not upload.path.exists()


@pytest.mark.parametrize("declared_too_big", [True, False])
def test_an_upload_over_the_limit_stops_and_leaves_no_file(
    db: Any, tmp_path: Path, declared_too_big: bool
) -> None:
    body = tmp_path / "body"
    _multipart_body(body, payload_mib=3)
    before = set(incoming_dir().iterdir())
    with body.open("rb") as stream:
        request = _request(body, stream)
        # Under the declared length (checked at the start) but over the real payload, or the reverse.
        handler = StreamingUploadHandler(request, max_bytes=1 * MIB if declared_too_big else 3 * MIB - 1)
        request.upload_handlers = [handler]
        assert "file" not in request.FILES
    assert handler.rejection is not None and "upload limit" in handler.rejection
    assert handler.path is None
    assert set(incoming_dir().iterdir()) == before
