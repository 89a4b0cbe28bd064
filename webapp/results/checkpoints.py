"""A run's checkpoints for people: the list (step, size, whether its files are gone) and the
download of one as a zip stream, on the run page and over the REST API (docs/checkpoints.md#downloading).

Only a folder inside the run's own checkpoint folder is ever read (webapp.experiments.run_files.
checkpoint_folder): the path a trainer reported is taken as a claim, not as a place to serve files from.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.cache import patch_cache_control

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.experiments.access import get_run_for_user
from webapp.experiments.models import Run
from webapp.experiments.run_files import checkpoint_folder
from webapp.ingestion.models import Checkpoint

CHUNK_BYTES = 1 << 20  # read and sent a mebibyte at a time: a 1.6 GB checkpoint never sits in memory


def checkpoint_files(folder: Path) -> list[Path]:
    """Every regular file under ``folder`` (links are left out: they could point anywhere)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


class _Sink(io.RawIOBase):
    """Where the zip writer writes; drained into the response after every chunk."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


def zip_chunks(folder: Path) -> Iterator[bytes]:
    """The folder as a zip (stored, not compressed: weights do not compress), chunk by chunk. The
    stream cannot seek, so sizes follow each file (data descriptors); zip64 keeps files over 4 GiB."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for path in checkpoint_files(folder):
            name = f"{folder.name}/{path.relative_to(folder).as_posix()}"
            with path.open("rb") as source, archive.open(name, "w", force_zip64=True) as target:
                while block := source.read(CHUNK_BYTES):
                    target.write(block)
                    yield sink.drain()
            yield sink.drain()
    yield sink.drain()


def download_response(run: Run, checkpoint: Checkpoint, folder: Path) -> StreamingHttpResponse:
    return folder_response(folder, f"run-{run.pk}-{folder.name}")


def folder_response(folder: Path, name: str) -> StreamingHttpResponse:
    """``folder`` as the zip download ``name``.zip (a checkpoint, an export)."""
    response = StreamingHttpResponse(zip_chunks(folder), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{name}.zip"'
    patch_cache_control(response, private=True)  # run data: never kept by a shared cache
    return response


def checkpoint_of(run: Run, step: int) -> Checkpoint:
    found = run.checkpoints.filter(step=step).order_by("-received").first()
    if found is None:
        raise Http404(f"run {run.pk} has no checkpoint of step {step}")
    return found


def download_url(run: Run, step: int) -> str:
    return reverse("checkpoint_download", kwargs={"team_slug": run.team.slug, "run_id": run.pk, "step": step})


@login_required
def download(request: HttpRequest, team_slug: str, run_id: int, step: int) -> StreamingHttpResponse:
    """The run page's download link: whoever may read the run may download its checkpoints."""
    run = get_run_for_user(request, team_slug, run_id)
    checkpoint = checkpoint_of(run, step)
    folder = checkpoint_folder(checkpoint)
    if folder is None:
        raise Http404("the checkpoint's files are gone (deleted under trainer.keep_checkpoints, or moved)")
    return download_response(run, checkpoint, folder)


def get_checkpoint_for_user(
    request: HttpRequest, team_slug: str, pk: int, *, write: bool = False
) -> Checkpoint:
    """The one access helper of a checkpoint by its id: one of another team's is a 404."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER if write else Role.VIEWER)
    return get_object_or_404(Checkpoint.objects.select_related("run"), pk=pk, run__team=team)
