"""REST 3.0 trace calls: logging one (webapp.mlflow_api.traces) and reading them back
(docs/mlflow.md#reading-traces-back): ``GET traces/<trace id>`` answers the trace info kept when it
was logged, ``POST traces/search`` the infos of an experiment's traces; the client then downloads
each trace's spans from its ``mlflow.artifactLocation`` through the artifact service. A trace is
found through the trajectory it became, so it is listed once its spans have landed; its info
carries the tag ``agent_r1.trajectory``, the trajectory's page.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from webapp.experiments.artifacts import artifact_root
from webapp.ingestion.models import Trajectory
from webapp.mlflow_api import search, traces, views
from webapp.mlflow_api import validation as check
from webapp.mlflow_api.access import Caller, searched_experiment_pk
from webapp.mlflow_api.errors import invalid, not_found

Body = dict[str, Any]
TRAJECTORY_TAG = "agent_r1.trajectory"
TRACE_SOURCE = "mlflow trace"  # Trajectory.info["source"] of a trajectory made from a trace
_ORDERS = {"timestamp_ms DESC", "timestamp DESC", "request_time DESC"}


def _traces(caller: Caller) -> Any:
    return Trajectory.objects.select_related("run__team").filter(
        run__in=caller.runs(), info__source=TRACE_SOURCE
    )


def _info(found: Trajectory) -> Body:
    """The trace info kept when the trace was logged, with the trajectory's page among its tags."""
    kept = artifact_root(found.run) / traces.TRACES / found.uid / traces.TRACE_INFO_FILE
    try:
        info = json.loads(kept.read_bytes())
    except (OSError, ValueError):
        raise not_found(f"Trace with ID {found.uid} not found.") from None
    page = reverse("trajectory", args=[found.run.team.slug, found.run_id, found.pk])
    info.setdefault("tags", {})[TRAJECTORY_TAG] = page
    return dict(info)


def get_trace_info(caller: Caller, body: Body, raw: bytes, *, trace_id: str) -> Body:
    found = _traces(caller).filter(uid=trace_id).first()
    if found is None:
        raise not_found(f"Trace with ID {trace_id} not found.")
    return {"trace": {"trace_info": _info(found)}}


def search_traces(caller: Caller, body: Body, raw: bytes) -> Body:
    """The traces of the experiments named (``locations`` or the older ``experiment_ids``), newest
    first; filters on ``metadata.mlflow.sourceRun`` (search_traces(run_id=…)) and tags."""
    size = check.max_results(check.optional_int(body, "max_results"), default=100)
    found = _traces(caller).filter(run__experiment_id__in=_experiment_pks(caller, body))
    for clause in search.parse_filter(check.optional_string(body, "filter")):
        found = found.filter(**_trace_filter(clause))
    for order in check.array(body, "order_by"):
        if " ".join(str(order).split()) not in _ORDERS:
            raise invalid(f"Invalid order_by clause '{order}'. Traces are ordered newest first.")
    page, token = search.page(found.order_by("-pk"), check.optional_string(body, "page_token"), size)
    answer: Body = {"traces": [_info(trajectory) for trajectory in page]}
    return {**answer, "next_page_token": token} if token else answer


def _experiment_pks(caller: Caller, body: Body) -> list[int]:
    ids = [str(value) for value in check.array(body, "experiment_ids")]
    for location in check.objects(body, "locations"):
        ids.append(str((location.get("mlflow_experiment") or {}).get("experiment_id") or ""))
    return [searched_experiment_pk(caller, value) for value in ids]


def _trace_filter(clause: search.Clause) -> dict[str, Any]:
    if clause.op != "=" or not isinstance(clause.value, str):
        raise invalid(f"Invalid trace filter on '{clause.name}': this server filters traces with = only.")
    if clause.entity == "attribute" and clause.name.replace("`", "") in (
        "metadata.mlflow.sourceRun",
        "run_id",
    ):
        return {"run__mlflow_run_id": clause.value}
    if clause.entity == "tag":
        return {f"info__tags__{clause.name}": clause.value}
    raise invalid(f"Invalid trace filter on '{clause.name}': this server filters on the run and on tags.")


def route(path: str, method: str | None) -> tuple[str, Any] | None:
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "traces" and parts[1] not in ("search", "get"):
        return "GET", lambda caller, body, raw: get_trace_info(caller, body, raw, trace_id=parts[1])
    return None


ENDPOINTS: dict[str, tuple[str, views.Handler]] = {
    "traces": ("POST", traces.start_trace),
    "traces/search": ("POST", search_traces),
}


@csrf_exempt
def endpoint(request: HttpRequest, path: str, team_slug: str | None = None) -> HttpResponse:
    return views.serve(request, path, team_slug, ENDPOINTS.get(path) or route(path, request.method))
