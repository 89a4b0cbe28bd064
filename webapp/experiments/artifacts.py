"""A run's artifacts: files a client logged onto the run (MLflow's ``log_artifact`` and kin, through
webapp/mlflow_api/artifacts.py), kept in the run's own folder so deleting the run deletes them
(docs/mlflow.md#artifacts). The run page lists them and this module serves a download."""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path, PurePosixPath

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest

from webapp.experiments.access import get_run_for_user
from webapp.experiments.models import Run
from webapp.experiments.run_files import run_files_dir

FOLDER = "artifacts"  # under a run's files; also the segment after the run id in an artifact URI
UPLOADING = ".upload-"  # prefix of a file still being written (renamed over its target when done)
# A path segment that would leave the folder or cannot be a file name here.
_BAD_SEGMENT = re.compile(r"[\x00/\\]")
NAME_MAX = 255  # bytes of one file or folder name (Linux's NAME_MAX)


class BadArtifactPath(ValueError):
    pass


def artifact_root(run: Run) -> Path:
    return run_files_dir(run) / FOLDER


def relative_path(parts: list[str]) -> PurePosixPath:
    """A path inside a run's artifacts; BadArtifactPath when a segment could leave that folder."""
    for part in parts:
        if part in ("", ".", "..") or _BAD_SEGMENT.search(part):
            raise BadArtifactPath(f"Invalid artifact path {'/'.join(parts)!r}: segments must be plain names.")
        if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX:
            raise BadArtifactPath(
                f"Invalid artifact path: the name {part[:40]!r}… is longer than {NAME_MAX} bytes."
            )
    return PurePosixPath(*parts)


def stored(run: Run) -> list[tuple[str, int]]:
    """(path, size) of every artifact of a run, for its page."""
    root = artifact_root(run)
    if not root.is_dir():
        return []
    return sorted(
        (path.relative_to(root).as_posix(), path.stat().st_size)
        for path in root.rglob("*")
        if path.is_file() and not path.name.startswith(UPLOADING)
    )


def file_response(path: Path) -> FileResponse:
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    # Served as a download, never rendered: a logged .html or .svg must not run in our origin.
    response = FileResponse(
        path.open("rb"), content_type=content_type, as_attachment=True, filename=path.name
    )
    response["Cache-Control"] = "private"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
def download(request: HttpRequest, team_slug: str, pk: int, path: str) -> FileResponse:
    run = get_run_for_user(request, team_slug, pk)
    try:
        inside = relative_path(path.split("/"))
    except BadArtifactPath:
        raise Http404("no such artifact") from None
    target = artifact_root(run) / inside
    if not target.is_file():
        raise Http404("no such artifact")
    return file_response(target)
