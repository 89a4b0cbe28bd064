"""MLflow's artifact service (``mlflow-artifacts``): upload, download and list a run's files.

A run's ``artifact_uri`` is ``mlflow-artifacts:/<experiment>/<run id>/artifacts``; the official
client resolves it against the tracking URI and calls (docs/mlflow.md#artifacts):

- ``PUT  …/api/2.0/mlflow-artifacts/artifacts/<experiment>/<run id>/artifacts/<path>`` — the file
  is the body (``mlflow.log_artifact``, ``log_dict``, ``log_text`` and ``log_artifacts`` all end here);
- ``GET  …/api/2.0/mlflow-artifacts/artifacts/<same>`` — the file;
- ``GET  …/api/2.0/mlflow-artifacts/artifacts?path=<experiment>/<run id>/artifacts[/<dir>]`` — the
  entries of a folder, ``{"files": [{"path", "is_dir", "file_size"}]}`` with paths relative to it.

Files live in the run's own folder (webapp/experiments/artifacts.py), so deleting the run deletes
them. The same tokens and roles as the tracking calls apply: reading needs a viewer, writing a member or the
run's own token.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from trainer.contract import TrajectoryBatch
from webapp.experiments.artifacts import (
    FOLDER,
    UPLOADING,
    BadArtifactPath,
    artifact_root,
    file_response,
    relative_path,
)
from webapp.experiments.models import Run
from webapp.mlflow_api import logged_models, traces
from webapp.mlflow_api.access import Caller, authenticate, get_run_for_caller
from webapp.mlflow_api.errors import MlflowError, invalid, not_found

MAX_PATH = 1000
CHUNK = 1 << 20


def resolve(caller: Caller, uri_path: str, *, write: bool = False) -> tuple[Run, PurePosixPath]:
    """``<experiment>/<run id>/artifacts[/<path>]`` → the run (role-checked) and the path inside it."""
    if len(uri_path) > MAX_PATH:
        raise invalid(f"Artifact paths are limited to {MAX_PATH} characters.")
    parts = uri_path.strip("/").split("/")
    if len(parts) >= 4 and parts[1] == "models" and parts[3] == FOLDER:
        return _resolve_model(caller, parts, write)
    if len(parts) < 3 or parts[2] != FOLDER:
        raise invalid(f"Invalid artifact path {uri_path!r}: expected <experiment>/<run id>/artifacts/<path>.")
    run = get_run_for_caller(caller, parts[1], write=write)
    if str(run.experiment_id) != parts[0]:
        raise not_found(f"Run with id={parts[1]} not found")
    try:
        return run, relative_path(parts[3:])
    except BadArtifactPath as error:
        raise invalid(str(error)) from None


def _resolve_model(caller: Caller, parts: list[str], write: bool) -> tuple[Run, PurePosixPath]:
    """``<experiment>/models/<model id>/artifacts[/<path>]``: a logged model's files, kept among its
    source run's artifacts (docs/mlflow.md#logged-models)."""
    model = logged_models.get_model_for_caller(caller, parts[2])
    if str(model.experiment_id) != parts[0]:
        raise not_found(f"Logged model with ID '{parts[2]}' not found.")
    if model.source_run is None:
        raise invalid(
            f"The logged model {model.model_id} has no run, and a model's files live with its run here."
        )
    run = get_run_for_caller(caller, model.source_run.mlflow_run_id, write=write)
    try:
        return run, relative_path([logged_models.MODELS_FOLDER, model.model_id, *parts[4:]])
    except BadArtifactPath as error:
        raise invalid(str(error)) from None


def upload(request: HttpRequest, run: Run, inside: PurePosixPath) -> HttpResponse:
    if not inside.parts:
        raise invalid("An artifact upload names a file under the run's artifacts.")
    limit = settings.UPLOAD_MAX_BYTES
    too_large = invalid(f"The artifact is larger than this server's limit of {limit} bytes.")
    if int(request.headers.get("Content-Length") or 0) > limit:
        raise too_large
    root = artifact_root(run)
    target = root / inside
    if target.is_dir():
        raise invalid(f"{inside} is a folder of artifacts, not a file.")
    for folder in inside.parents:
        if (root / folder).is_file():
            raise invalid(f"{folder} is an artifact file, so {inside} cannot be put under it.")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file of that name put meanwhile
        raise invalid(f"A folder of {inside} is an artifact file.") from None
    # Written beside the target and renamed over it: a reader never sees half a file.
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=UPLOADING)
    written = 0
    trace: TrajectoryBatch | None = None
    try:
        with os.fdopen(handle, "wb") as out:
            while chunk := request.read(CHUNK):
                written += len(chunk)
                if written > limit:
                    raise too_large
                out.write(chunk)
        # A trace's spans (docs/mlflow.md#traces) are read before the file is kept: spans that
        # make no trajectory are refused whole.
        trace = traces.prepare(run, inside, Path(temporary))
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if trace is not None:
        traces.land(run, trace)
    return HttpResponse(b"{}", content_type="application/json")


def download(run: Run, inside: PurePosixPath) -> HttpResponseBase:
    target = artifact_root(run) / inside
    if not inside.parts or not target.is_file():
        raise not_found(f"No artifact {inside} in run {run.mlflow_run_id}")
    return file_response(target)


def listing(run: Run, inside: PurePosixPath) -> HttpResponse:
    folder = artifact_root(run) / inside
    files: list[dict[str, object]] = []
    if folder.is_file():
        # MLflow lists a file as itself; its client then answers "no entries" for a file path.
        files.append({"path": folder.name, "is_dir": False, "file_size": folder.stat().st_size})
    elif folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if entry.name.startswith(UPLOADING):
                continue
            item: dict[str, object] = {"path": entry.name, "is_dir": entry.is_dir()}
            if not entry.is_dir():
                item["file_size"] = entry.stat().st_size
            files.append(item)
    return HttpResponse(orjson.dumps({"files": files}), content_type="application/json")


@csrf_exempt
def artifacts(request: HttpRequest, path: str = "", team_slug: str | None = None) -> HttpResponseBase:
    try:
        caller = authenticate(request, team_slug)
        if not path:
            if request.method != "GET":
                return HttpResponseNotAllowed(["GET"])
            run, inside = resolve(caller, request.GET.get("path", ""))
            return listing(run, inside)
        if request.method == "PUT":
            run, inside = resolve(caller, path, write=True)
            return upload(request, run, inside)
        if request.method == "GET":
            run, inside = resolve(caller, path)
            return download(run, inside)
        return HttpResponseNotAllowed(["GET", "PUT"])
    except MlflowError as error:
        return error.response()
