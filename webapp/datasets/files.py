"""Where dataset files live, and the upload handler that streams a browser upload to disk.

Uploads never sit in memory: each 64 KiB chunk is hashed and written to a temporary file under
``DATASETS_DIR/incoming``, which is then renamed into ``DATASETS_DIR/<team id>/<sha256>.parquet``.
Both directories are on the same filesystem, so the rename is atomic.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.http import FileResponse, HttpRequest

UPLOAD_FIELD = "file"
# Room for the multipart boundaries and the small text fields around the file.
_MULTIPART_SLACK = 64 * 2**10
_HASH_BLOCK = 2**20


def parquet_download(path: Path, filename: str) -> FileResponse:
    """The parquet file at ``path`` as a download named ``filename`` (the API's and the trainer's)."""
    return FileResponse(
        path.open("rb"), as_attachment=True, filename=filename, content_type="application/vnd.apache.parquet"
    )


def incoming_dir() -> Path:
    path = Path(settings.DATASETS_DIR) / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stored_path(team_id: int, sha256: str) -> Path:
    return Path(settings.DATASETS_DIR) / str(team_id) / f"{sha256}.parquet"


def new_incoming_file() -> tuple[IO[bytes], Path]:
    handle = tempfile.NamedTemporaryFile(dir=incoming_dir(), suffix=".part", delete=False)  # noqa: SIM115
    return handle, Path(handle.name)


def sha256_of(path: Path) -> str:
    """The hash of a file already on disk (recipe outputs), read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def too_large_message(max_bytes: int) -> str:
    return f"The file is larger than the upload limit of {human_size(max_bytes)} (STUDIO_UPLOAD_MAX_BYTES)."


def human_size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class StreamedUpload(UploadedFile):
    """An uploaded file already on disk, with the hash computed while it arrived."""

    def __init__(self, path: Path, name: str, content_type: str, size: int, sha256: str) -> None:
        super().__init__(file=None, name=name, content_type=content_type, size=size)
        self.path = path
        self.sha256 = sha256

    def close(self) -> None:
        """Nothing to close: the handler closed the file; Django calls this at the end of the request."""


class StreamingUploadHandler(FileUploadHandler):
    """Hashes and writes the one file field ``file`` to disk; stops at ``max_bytes``.

    An over-limit upload sets :attr:`rejection` and stops with ``StopUpload(connection_reset=False)``:
    Django then reads and discards the rest of the body in chunks, so the client still gets our
    error page instead of a reset connection.
    """

    def __init__(self, request: HttpRequest | None = None, *, max_bytes: int) -> None:
        super().__init__(request)
        self.max_bytes = max_bytes
        self.rejection: str | None = None
        self.request_length = 0
        # Not named `file`: Django's parser calls `handler.file.close()` on any attribute of that name.
        self._out: IO[bytes] | None = None
        self.path: Path | None = None
        self._digest = hashlib.sha256()

    def handle_raw_input(
        self, input_data: Any, META: Any, content_length: int, boundary: Any, encoding: Any = None
    ) -> None:
        self.request_length = content_length

    def new_file(self, field_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, *args, **kwargs)
        if field_name != UPLOAD_FIELD or self._out is not None:
            raise SkipFile()
        # Refuse before writing a byte when the declared request size already says too much.
        if self.request_length > self.max_bytes + _MULTIPART_SLACK:
            self._reject()
        self._out, self.path = new_incoming_file()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        if start + len(raw_data) > self.max_bytes:
            self._reject()
        self._digest.update(raw_data)
        if self._out is not None:
            self._out.write(raw_data)

    def file_complete(self, file_size: int) -> StreamedUpload | None:
        if self._out is None or self.path is None:
            return None
        self._out.close()
        return StreamedUpload(
            self.path,
            self.file_name or "upload.parquet",
            self.content_type or "",
            file_size,
            self._digest.hexdigest(),
        )

    def upload_interrupted(self) -> None:
        self._remove_partial()

    def remove_leftover(self) -> None:
        """Delete the streamed file unless it was adopted (moved away) by a dataset."""
        self._remove_partial()

    def _reject(self) -> None:
        self.rejection = too_large_message(self.max_bytes)
        self._remove_partial()
        raise StopUpload(connection_reset=False)

    def _remove_partial(self) -> None:
        if self._out is not None:
            self._out.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        self._out, self.path = None, None


def move_into_place(source: Path, team_id: int, sha256: str) -> Path:
    """Rename ``source`` to its content-addressed place; an existing file there has the same bytes."""
    dest = stored_path(team_id, sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, dest)
    return dest
