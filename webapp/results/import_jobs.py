"""A run import as a job (docs/imports.md#as-a-job): the request checks its limits, saves the
uploaded files beside the job and answers at once; a Celery worker parses and stores them
(:mod:`webapp.results.imports`) while the job tells its progress. The page and the REST API share
every check here, and only map the refusals onto their own answers.

Limits, each refused before the work starts and with its reason: the whole upload at most
STUDIO_IMPORT_MAX_BYTES (413, read from Content-Length before the body is), at most Django's
DATA_UPLOAD_MAX_NUMBER_FILES files (400, the ``dump`` field), and STUDIO_IMPORTS_PER_MEMBER imports
queued or running per member (429).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import TooManyFilesSent
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest

from webapp.experiments.jobs import Job, JobKind, JobRefused, TooManyJobs
from webapp.results import imports

IMPORT_JOB = "import"
IMPORT_TASK = "webapp.results.tasks.import_run_task"
IMPORT = JobKind(IMPORT_JOB, IMPORT_TASK, most="IMPORTS_PER_MEMBER")


class ImportRefused(Exception):
    """An import request refused before any work: ``status`` and the ``field`` to blame."""

    def __init__(self, message: str, status: int = 400, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.field = status, field


@dataclass(frozen=True)
class ImportRequest:
    team: Any
    user: Any
    experiment: str
    name: str
    dumps: Sequence[UploadedFile]
    metrics: UploadedFile | None


def check_before_upload(request: HttpRequest) -> None:
    """The limits an import meets before its body is read: its size, and the member's imports
    already queued or running (so neither a refused upload nor a 429 first costs the transfer)."""
    limit = settings.IMPORT_MAX_BYTES
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise ImportRefused(
            f"the upload is {length} bytes; an import takes at most {limit} (STUDIO_IMPORT_MAX_BYTES): "
            "import the run's dumps without its largest files, or raise the limit",
            413,
        )
    _check_room(request.user)


def uploaded_files(request: HttpRequest) -> tuple[list[UploadedFile], UploadedFile | None]:
    """(the dumps, the metrics file) of a multipart import; too many files is the dumps' fault."""
    try:
        return request.FILES.getlist("dump"), request.FILES.get("metrics")
    except TooManyFilesSent:
        most = settings.DATA_UPLOAD_MAX_NUMBER_FILES
        raise ImportRefused(
            f"at most {most} files in one import: concatenate the dumps first (each line names its "
            "step), e.g. cat DIR/*.jsonl > all.jsonl",
            field="dump",
        ) from None


def start_import(upload: ImportRequest) -> Job:
    """The import's job, its files saved in the job's folder and its task sent."""
    try:
        job = Job.start(
            IMPORT,
            upload.team,
            user=upload.user,
            options={
                "experiment": upload.experiment,
                "name": upload.name,
                "dumps": [f.name for f in upload.dumps],
                "metrics": upload.metrics.name if upload.metrics else None,
            },
        )
    except TooManyJobs as error:
        raise ImportRefused(str(error), 429) from None
    try:
        _save(job.folder, upload.dumps, upload.metrics)
    except BaseException:
        job.abandon("its files could not be saved")
        raise
    job.enqueue()
    return job


def run_import(job: Job) -> dict[str, Any]:
    """The job's work (its task's): parse the saved files, store the run; the counts it made."""
    options = job.options
    dumps = [_Saved(job.folder / f"dump-{i}", name) for i, name in enumerate(options["dumps"])]
    metrics = _Saved(job.folder / "metrics", options["metrics"]) if options.get("metrics") else None
    try:
        parsed = imports.parse_files(
            dumps, metrics, progress=lambda done, total: job.progress("reading the dumps", done, total)
        )
        job.progress(f"storing {parsed.trajectories} trajectories over {len(parsed.steps)} steps")
        done = imports.import_run(job.team, job.user, options["experiment"], options["name"], parsed)
    except imports.DumpRefused as refused:
        raise JobRefused(str(refused)) from None
    Job.objects.filter(pk=job.pk).update(run=done.run)
    return {
        "format": parsed.format,
        "trajectories": done.trajectories,
        "points": done.points,
        "steps": done.steps,
    }


def _check_room(user: Any) -> None:
    counted, most = IMPORT.limit({"user": user})
    active = Job.active().filter(counted, kind=IMPORT_JOB).count()
    if active >= most:
        raise ImportRefused(
            f"you have {active} imports queued or running (STUDIO_IMPORTS_PER_MEMBER is {most}): wait for one",
            429,
        )


def _save(folder: Path, dumps: Sequence[UploadedFile], metrics: UploadedFile | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    named = [(f"dump-{i}", dump) for i, dump in enumerate(dumps)] + (
        [("metrics", metrics)] if metrics else []
    )
    for name, uploaded in named:
        with (folder / name).open("wb") as out:
            for chunk in uploaded.chunks():
                out.write(chunk)


@dataclass(frozen=True)
class _Saved:
    """A saved upload as the parser reads one: its name, and its lines."""

    path: Path
    name: str

    def __iter__(self) -> Iterator[bytes]:
        with self.path.open("rb") as lines:
            yield from lines
