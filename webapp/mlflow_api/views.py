"""The REST 2.0 tracking calls, one small function each: read the fields MLflow's handler reads,
check them the way it does, call the same Run and ingestion methods the trainer's API calls,
answer in the proto's JSON shape. This module adapts MLflow's bodies; it keeps no data of its own.

Every handler takes (caller, body, request body bytes) and returns the response dict; errors are
MlflowError, which :func:`endpoint` turns into MLflow's error body.

Metrics go into the ingestion's append-only point store, keyed by (run, key, step): a replayed
batch stores nothing new. Unlike MLflow, a second value for a step of a key is not kept (the first
one logged wins), which is what makes replays idempotent.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.csrf import csrf_exempt

from trainer.contract import INT4_MAX
from webapp.experiments.models import Experiment, LoggedValue, Run
from webapp.ingestion import metrics_store
from webapp.mlflow_api import entities, lifecycle, logged_models, search
from webapp.mlflow_api import validation as check
from webapp.mlflow_api.access import (
    DEFAULT_EXPERIMENT_ID,
    DEFAULT_EXPERIMENT_NAME,
    Caller,
    authenticate,
    check_can_create,
    default_experiment,
    get_experiment_for_caller,
    get_run_for_caller,
    run_ended,
    searched_experiment_pk,
)
from webapp.mlflow_api.entities import OUR_STATUS, RUN_NAME_TAG, UNKNOWN_USER, USER_TAG, from_ms
from webapp.mlflow_api.errors import (
    ENDPOINT_NOT_FOUND,
    INTERNAL_ERROR,
    RESOURCE_ALREADY_EXISTS,
    MlflowError,
    invalid,
    not_found,
)

logger = logging.getLogger(__name__)

Body = dict[str, Any]
Handler = Callable[[Caller, Body, bytes], Body]


# -- experiments -----------------------------------------------------------------------------------


def get_experiment_by_name(caller: Caller, body: Body, raw: bytes) -> Body:
    name = check.required_string(body, "experiment_name")
    if name == DEFAULT_EXPERIMENT_NAME and caller.run is None:
        default_experiment(caller)
    found = caller.experiments().filter(name=name).first()
    if found is None:
        raise not_found(f"Could not find experiment with name '{name}'")
    return {"experiment": entities.experiment(found)}


def create_experiment(caller: Caller, body: Body, raw: bytes) -> Body:
    name = check.experiment_name(check.required_string(body, "name"))
    tags = [
        check.tag(t.get("key"), t.get("value"), f"tags[{i}]")
        for i, t in enumerate(check.objects(body, "tags"))
    ]
    check_can_create(caller)
    with transaction.atomic():
        experiment, created = Experiment.create_external(caller.team, name, caller.user)
        if not created:
            # MLflow's client answers this by reading the experiment again (set_experiment's race).
            raise MlflowError(f"Experiment(name={name}) already exists.", RESOURCE_ALREADY_EXISTS)
        lifecycle.set_experiment_tags(experiment, tags)
    return {"experiment_id": str(experiment.pk)}


def get_experiment(caller: Caller, body: Body, raw: bytes) -> Body:
    found = get_experiment_for_caller(caller, check.required_string(body, "experiment_id"))
    return {"experiment": entities.experiment(found)}


def search_experiments(caller: Caller, body: Body, raw: bytes) -> Body:
    size = check.max_results(check.optional_int(body, "max_results"), default=1000)
    if caller.run is None:
        default_experiment(caller)
    experiments = search.with_view_type(caller.experiments(), body.get("view_type"))
    experiments = search.filter_experiments(experiments, check.optional_string(body, "filter"))
    experiments = search.order_experiments(experiments, check.array(body, "order_by"))
    found, token = search.page(experiments, check.optional_string(body, "page_token"), size)
    return _with_token({"experiments": [entities.experiment(e) for e in found]}, token)


def _user_tag(body: Body, tags: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client sends its mlflow.user tag as user_id too; a user_id alone is kept as that tag."""
    user_id = check.optional_string(body, "user_id")
    if not user_id or user_id == UNKNOWN_USER or any(key == USER_TAG for key, _ in tags):
        return tags
    return [*tags, (USER_TAG, user_id)]


# -- runs ------------------------------------------------------------------------------------------


def create_run(caller: Caller, body: Body, raw: bytes) -> Body:
    start_time = check.timestamp_ms(body, "start_time")
    run_name = check.optional_string(body, "run_name")
    tags = [
        check.tag(t.get("key"), t.get("value"), f"tags[{i}]")
        for i, t in enumerate(check.objects(body, "tags"))
    ]
    name = check.run_name(run_name, tags, RUN_NAME_TAG)
    check_can_create(caller)
    experiment = get_experiment_for_caller(caller, body.get("experiment_id") or DEFAULT_EXPERIMENT_ID)
    tags = _user_tag(body, tags)
    with transaction.atomic():
        run = Run.create_external(experiment, name, from_ms(start_time) if start_time else None)
        _set_tags(run, tags)
    return {"run": entities.runs([run])[0]}


def get_run(caller: Caller, body: Body, raw: bytes) -> Body:
    run = get_run_for_caller(caller, check.required_string(body, "run_id", alias="run_uuid"))
    return {"run": entities.runs([run])[0]}


def update_run(caller: Caller, body: Body, raw: bytes) -> Body:
    run_id = check.required_string(body, "run_id", alias="run_uuid")
    end_time = check.timestamp_ms(body, "end_time")
    status = check.optional_string(body, "status")
    run_name = check.optional_string(body, "run_name")
    if run_name:
        check.checked_run_name(run_name)
    our_status = OUR_STATUS.get(status) if status else None
    if status and our_status is None:
        raise invalid(f"Invalid value \"{status}\" for parameter 'status' supplied.")
    run = get_run_for_caller(caller, run_id, write=True, ended_ok=True)
    if run.is_terminal:
        # Ending a run again (the client retrying an end_run whose answer was lost) changes nothing
        # and succeeds; anything else is a write to a run whose results are final.
        if run_name or our_status not in (None, run.status):
            raise run_ended(run)
    else:
        run.update_from_mlflow(our_status, from_ms(end_time), run_name)
    return {"run_info": entities.runs([run])[0]["info"]}


def search_runs(caller: Caller, body: Body, raw: bytes) -> Body:
    experiment_ids = check.array(body, "experiment_ids")
    size = check.max_results(check.optional_int(body, "max_results"), default=1000)
    # Ids of no experiment (or another team's) match no run, as on MLflow.
    pks = [searched_experiment_pk(caller, value) for value in experiment_ids]
    runs = search.with_view_type(caller.runs().filter(experiment_id__in=pks), body.get("run_view_type"))
    runs = search.filter_runs(runs, check.optional_string(body, "filter"))
    runs = search.order_runs(runs, check.array(body, "order_by"))
    found, token = search.page(runs, check.optional_string(body, "page_token"), size)
    return _with_token({"runs": entities.runs(found)}, token)


# -- logging ---------------------------------------------------------------------------------------


def log_batch(caller: Caller, body: Body, raw: bytes) -> Body:
    run_id = check.run_id(check.required_string(body, "run_id"))
    metric_items, param_items, tag_items = (
        check.array(body, "metrics"),
        check.objects(body, "params"),
        check.objects(body, "tags"),
    )
    check.fields_present(param_items, "params", ("key",))
    check.fields_present(tag_items, "tags", ("key",))
    metrics = check.metrics(metric_items)
    params = [check.param(p.get("key"), p.get("value"), f"params[{i}]") for i, p in enumerate(param_items)]
    tags = [check.tag(t.get("key"), t.get("value"), f"tags[{i}]") for i, t in enumerate(tag_items)]
    check.batch_limits(len(metric_items), len(params), len(tags))
    check.unique_param_keys(params)
    run = get_run_for_caller(caller, run_id, write=True)
    _log(run, metrics, params, tags, raw)
    logged_models.record_metrics(run, metric_items)
    return {}


def log_metric(caller: Caller, body: Body, raw: bytes) -> Body:
    run_id = check.required_string(body, "run_id", alias="run_uuid")
    for name in ("key", "value", "timestamp"):
        check.required(body, name)
    metrics = check.metrics([body], single=True)
    run = get_run_for_caller(caller, run_id, write=True)
    _log(run, metrics, [], [], raw)
    logged_models.record_metrics(run, [body])
    return {}


def log_param(caller: Caller, body: Body, raw: bytes) -> Body:
    return _log_one(caller, body, check.param, _log_params)


def set_tag(caller: Caller, body: Body, raw: bytes) -> Body:
    return _log_one(caller, body, check.tag, _set_tags)


def _log_one(
    caller: Caller,
    body: Body,
    checked: Callable[[Any, Any], tuple[str, str]],
    save: Callable[[Run, list[tuple[str, str]]], None],
) -> Body:
    """log-parameter and set-tag: one key and value on a run, checked before the run is looked up."""
    run_id = check.required_string(body, "run_id", alias="run_uuid")
    check.required_string(body, "key")
    item = checked(body.get("key"), body.get("value"))
    save(get_run_for_caller(caller, run_id, write=True), [item])
    return {}


# mlflow's GET_METRIC_HISTORY_MAX_RESULTS: the page the official client asks for.
HISTORY_PAGE_SIZE = 25_000


def get_metric_history(caller: Caller, body: Body, raw: bytes) -> Body:
    run_id = check.required_string(body, "run_id", alias="run_uuid")
    key = check.required_string(body, "metric_key")
    limit = check.optional_int(body, "max_results")
    if limit is not None and not 0 < limit <= INT4_MAX:
        raise invalid(
            f"Invalid value {limit} for parameter 'max_results' supplied. It must be a positive integer "
            f"up to {INT4_MAX}."
        )
    run = get_run_for_caller(caller, run_id)
    # Paged even when the client asks for everything (MLflow's server answers it all at once: 84 MiB
    # for a long run, held in a web worker). The official client pages by this size and follows
    # next_page_token, so it reads the whole history either way.
    page = min(limit or HISTORY_PAGE_SIZE, HISTORY_PAGE_SIZE)
    after = search.page_offset(check.optional_string(body, "page_token")) - 1
    points = metrics_store.raw_points(run.pk, key, after + 1, INT4_MAX, page)
    token = search.page_token(points[-1][0] + 1) if len(points) == page else None
    return _with_token({"metrics": [entities.metric(key, v, t, s) for s, v, t in points]}, token)


def _log(
    run: Run, metrics: check.Metrics, params: list[tuple[str, str]], tags: list[tuple[str, str]], body: bytes
) -> None:
    """Params, then metrics, then tags (MLflow's order); all or nothing."""
    # A metrics-only batch (every training step's) needs no outer transaction: write_points is one,
    # and skipping the savepoints a nested one costs saves round trips on the hot path.
    with transaction.atomic() if params or tags else contextlib.nullcontext():
        _log_params(run, params)
        if metrics.key:
            # The batch id is the body's hash: the same request sent twice stores its points once
            # (and a different body repeating (key, step) pairs is deduplicated by the point table).
            batch_id = "mlflow-" + hashlib.sha256(body).hexdigest()[:57]
            metrics_store.write_points(run.pk, batch_id, metrics.points())
        _set_tags(run, tags)
    if metrics.key:
        # For a launched run, metrics are the trainer's sign of life (verl sends no heartbeats of
        # its own); an external run's counter follows them.
        run.note_progress(max(metrics.step))


def _log_params(run: Run, params: list[tuple[str, str]]) -> None:
    check.unchanged_params(run.mlflow_run_id, LoggedValue.log_params(run, dict(params)), len(params))


def _set_tags(run: Run, tags: list[tuple[str, str]]) -> None:
    """The run name lives on Run.name, not among the logged tags; a key repeated in one batch: the last
    value wins."""
    names = [value for key, value in tags if key == RUN_NAME_TAG]
    if names:
        run.rename(names[-1])
    LoggedValue.set_tags(run, {key: value for key, value in tags if key != RUN_NAME_TAG})


# -- plumbing --------------------------------------------------------------------------------------


def _with_token(response: Body, token: str | None) -> Body:
    if token:
        response["next_page_token"] = token
    return response


ENDPOINTS: dict[str, tuple[str, Handler]] = {
    "experiments/get-by-name": ("GET", get_experiment_by_name),
    "experiments/create": ("POST", create_experiment),
    "experiments/get": ("GET", get_experiment),
    "experiments/search": ("POST", search_experiments),
    "runs/create": ("POST", create_run),
    "runs/get": ("GET", get_run),
    "runs/update": ("POST", update_run),
    "runs/search": ("POST", search_runs),
    "runs/log-batch": ("POST", log_batch),
    "runs/log-metric": ("POST", log_metric),
    "runs/log-parameter": ("POST", log_param),
    "runs/set-tag": ("POST", set_tag),
    "metrics/get-history": ("GET", get_metric_history),
    **lifecycle.ENDPOINTS,
    **logged_models.ENDPOINTS,
}


@csrf_exempt
def endpoint(request: HttpRequest, path: str, team_slug: str | None = None) -> HttpResponse:
    return serve(request, path, team_slug, ENDPOINTS.get(path) or logged_models.route(path, request.method))


def serve(
    request: HttpRequest, path: str, team_slug: str | None, entry: tuple[str, Handler] | None
) -> HttpResponse:
    """One call of a table of handlers (this module's, or the trace calls'): authenticate, read the
    body, answer in MLflow's shapes."""
    if entry is None:
        return unknown(request, path)
    method, handler = entry
    if request.method != method:
        return HttpResponseNotAllowed([method])
    try:
        caller = authenticate(request, team_slug)
        body = _request_body(request)
        answer = handler(caller, body, request.body if request.method == "POST" else b"")
    except MlflowError as error:
        return error.response()
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return invalid(f"The request body is larger than this server's limit of {limit} bytes.").response()
    except Exception:
        # Our bug, in MLflow's shape: its client reads the body of every error it gets.
        logger.exception("MLflow call %s failed", path)
        return MlflowError("The server failed on this request; it is logged.", INTERNAL_ERROR).response()
    return HttpResponse(orjson.dumps(answer), content_type="application/json")


def _request_body(request: HttpRequest) -> Body:
    if request.method == "GET":
        return dict(request.GET.items())
    try:
        body = orjson.loads(request.body or b"{}")
    except orjson.JSONDecodeError as error:
        raise invalid(f"The request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


@csrf_exempt
def unknown(request: HttpRequest, path: str = "", team_slug: str | None = None) -> HttpResponse:
    """Calls this server does not speak (the model registry, prompts, ...): MLflow's
    ENDPOINT_NOT_FOUND, so the client fails at once instead of retrying."""
    return MlflowError(
        f"Agent-R1 Studio's MLflow endpoint does not support {request.path}: it speaks MLflow's tracking "
        "calls (experiments, runs, metrics, params, tags, datasets, logged models, artifacts, traces); "
        "no model registry, prompts or evaluation (docs/mlflow.md#calls-not-served).",
        ENDPOINT_NOT_FOUND,
    ).response()
