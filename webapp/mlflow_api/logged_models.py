"""MLflow 3's logged models (docs/mlflow.md#logged-models): what every ``mlflow.<flavour>.log_model``
makes. The client creates the model (pending), uploads its files to the model's ``artifact_uri``
through the artifact service, names it an output of its run, and finalizes it (ready).

Calls live under ``logged-models/<model id>[/…]``, one path for several methods, so :func:`route`
picks the handler by path and method. Handlers take (caller, body, request body bytes) as in
webapp.mlflow_api.views.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import transaction

from webapp.experiments.models import Run
from webapp.mlflow_api import search
from webapp.mlflow_api import validation as check
from webapp.mlflow_api.access import (
    Caller,
    check_can_create,
    get_experiment_for_caller,
    get_run_for_caller,
    searched_experiment_pk,
)
from webapp.mlflow_api.entities import ms
from webapp.mlflow_api.errors import invalid, not_found
from webapp.mlflow_api.models import LoggedModel

Body = dict[str, Any]
PENDING, READY, FAILED = "LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED"
# Where a model's files live among its source run's artifacts.
MODELS_FOLDER = "logged-models"


def answer(model: LoggedModel) -> Body:
    """The LoggedModel proto's JSON."""
    info = {
        "experiment_id": str(model.experiment_id),
        "model_id": model.model_id,
        "name": model.name,
        "artifact_uri": f"mlflow-artifacts:/{model.experiment_id}/models/{model.model_id}/artifacts",
        "creation_timestamp_ms": ms(model.created),
        "last_updated_timestamp_ms": ms(model.updated),
        "model_type": model.model_type,
        "source_run_id": model.source_run.mlflow_run_id if model.source_run else "",
        "status": model.status,
        "status_message": model.status_message,
        "tags": [{"key": k, "value": v} for k, v in model.tags.items()],
    }
    params = [{"key": k, "value": v} for k, v in model.params.items()]
    return {"info": info, "data": {"params": params, "metrics": model.metrics}}


def get_model_for_caller(caller: Caller, model_id: str, *, write: bool = False) -> LoggedModel:
    found = (
        LoggedModel.objects.select_related("source_run")
        .filter(model_id=model_id, experiment__in=caller.experiments(), deleted=False)
        .first()
    )
    if found is None:
        raise not_found(f"Logged model with ID '{model_id}' not found.")
    if write:
        _check_model_write(caller, found.source_run)
    return found


def _check_model_write(caller: Caller, run: Run | None) -> None:
    """People with the member role; a run's token, for the models of its own run (a launched run
    calling log_model)."""
    if caller.run is None or run is None or run.pk != caller.run.pk:
        check_can_create(caller)


def _pairs(body: Body, name: str) -> dict[str, str]:
    items = check.objects(body, name)
    return dict(check.tag(item.get("key"), item.get("value"), f"{name}[{i}]") for i, item in enumerate(items))


def create(caller: Caller, body: Body, raw: bytes) -> Body:
    experiment = get_experiment_for_caller(caller, check.required_string(body, "experiment_id"))
    run_id = check.optional_string(body, "source_run_id")
    run = get_run_for_caller(caller, run_id, write=True) if run_id else None
    _check_model_write(caller, run)
    model_id = f"m-{uuid.uuid4().hex}"
    model = LoggedModel.objects.create(
        model_id=model_id,
        experiment=experiment,
        source_run=run,
        name=check.optional_string(body, "name") or model_id,
        model_type=check.optional_string(body, "model_type") or "",
        status=PENDING,
        params=_pairs(body, "params"),
        tags=_pairs(body, "tags"),
    )
    return {"model": answer(model)}


def get(caller: Caller, body: Body, raw: bytes, *, model_id: str) -> Body:
    return {"model": answer(get_model_for_caller(caller, model_id))}


def finalize(caller: Caller, body: Body, raw: bytes, *, model_id: str) -> Body:
    status = check.required_string(body, "status")
    if status not in (READY, FAILED):
        raise invalid(f"Invalid model status {status!r}: expected {READY} or {FAILED}.")
    model = get_model_for_caller(caller, model_id, write=True)
    model.status = status
    model.save(update_fields=["status", "updated"])
    return {"model": answer(model)}


def delete(caller: Caller, body: Body, raw: bytes, *, model_id: str) -> Body:
    model = get_model_for_caller(caller, model_id, write=True)
    model.deleted = True
    model.save(update_fields=["deleted", "updated"])
    return {}


def _update(caller: Caller, model_id: str, field: str, change: Any) -> Body:
    """Change one JSON field of a model under a row lock (concurrent tag writers keep each other's)."""
    get_model_for_caller(caller, model_id, write=True)
    with transaction.atomic():
        model = LoggedModel.objects.select_for_update().get(model_id=model_id)
        change(getattr(model, field))
        model.save(update_fields=[field, "updated"])
    return {}


def set_tags(caller: Caller, body: Body, raw: bytes, *, model_id: str) -> Body:
    tags = _pairs(body, "tags")
    return _update(caller, model_id, "tags", lambda current: current.update(tags))


def delete_tag(caller: Caller, body: Body, raw: bytes, *, model_id: str, key: str) -> Body:
    model = get_model_for_caller(caller, model_id)
    if key not in model.tags:
        raise not_found(f"No tag with key {key!r} found for model with ID {model_id!r}.")
    return _update(caller, model_id, "tags", lambda current: current.pop(key, None))


def log_params(caller: Caller, body: Body, raw: bytes, *, model_id: str) -> Body:
    params = dict(
        check.param(p.get("key"), p.get("value"), f"params[{i}]")
        for i, p in enumerate(check.objects(body, "params"))
    )
    return _update(caller, model_id, "params", lambda current: current.update(params))


def log_outputs(caller: Caller, body: Body, raw: bytes) -> Body:
    """A run names the models it produced (the client does after log_model's upload)."""
    run = get_run_for_caller(caller, check.required_string(body, "run_id"), write=True)
    for item in check.objects(body, "models"):
        model = get_model_for_caller(caller, str(item.get("model_id") or ""))
        LoggedModel.objects.filter(pk=model.pk).update(source_run=run, output_step=int(item.get("step") or 0))
    return {}


def record_metrics(run: Run, items: list[Any]) -> None:
    """Metrics logged with a model id (log_metric(..., model_id=…)) are the model's too."""
    by_model: dict[str, list[Body]] = {}
    for item in items:
        if isinstance(item, dict) and item.get("model_id"):
            metric = {k: item[k] for k in ("key", "value", "timestamp", "step", "model_id") if k in item}
            by_model.setdefault(str(item["model_id"]), []).append({**metric, "run_id": run.mlflow_run_id})
    for model_id, metrics in by_model.items():
        with transaction.atomic():
            model = (
                LoggedModel.objects.select_for_update()
                .filter(model_id=model_id, experiment__team=run.team)
                .first()
            )
            if model is None:
                raise not_found(f"Logged model with ID '{model_id}' not found.")
            model.metrics = [*model.metrics, *(m for m in metrics if m not in model.metrics)]
            model.save(update_fields=["metrics", "updated"])


def search_models(caller: Caller, body: Body, raw: bytes) -> Body:
    """Filtered on attributes (name, model_id, source_run_id, status, model_type), tags and params,
    in Python: an experiment holds a handful of models."""
    size = check.max_results(check.optional_int(body, "max_results"), default=100)
    pks = [searched_experiment_pk(caller, value) for value in check.array(body, "experiment_ids")]
    models = [
        answer(m)
        for m in LoggedModel.objects.select_related("source_run").filter(
            experiment_id__in=pks, experiment__team=caller.team, deleted=False
        )
    ]
    for clause in search.parse_filter(check.optional_string(body, "filter")):
        models = [m for m in models if _matches(m, clause)]
    for order in reversed(check.objects(body, "order_by")):
        field = str(order.get("field_name") or "")
        if field not in ("name", "creation_timestamp", "last_updated_timestamp"):
            raise invalid(f"Invalid order by field name: {field!r}.")
        key = field if field == "name" else f"{field}_ms"
        models.sort(key=lambda m: m["info"][key], reverse=order.get("ascending") is False)
    start = search.page_offset(check.optional_string(body, "page_token"))
    found = {"models": models[start : start + size]}
    return (
        {**found, "next_page_token": search.page_token(start + size)} if len(models) > start + size else found
    )


_ATTRIBUTES = {"name", "model_id", "source_run_id", "status", "model_type"}


def _matches(model: Body, clause: search.Clause) -> bool:
    if clause.entity == "attribute" and clause.name in _ATTRIBUTES:
        value = model["info"][clause.name]
    elif clause.entity in ("tag", "param"):
        pairs = model["info"]["tags"] if clause.entity == "tag" else model["data"]["params"]
        value = next((p["value"] for p in pairs if p["key"] == clause.name), None)
    else:
        raise invalid(f"Invalid filter on '{clause.name}' for logged models.")
    if clause.op == "=":
        return bool(value == clause.value)
    if clause.op == "!=":
        return bool(value != clause.value)
    if clause.op in ("IN", "NOT IN"):
        return (value in clause.value) == (clause.op == "IN")
    raise invalid(f"Invalid comparator '{clause.op}' for logged models; use =, !=, IN or NOT IN.")


Entry = tuple[str, Any]
ENDPOINTS: dict[str, Entry] = {
    "logged-models": ("POST", create),
    "logged-models/search": ("POST", search_models),
    "runs/outputs": ("POST", log_outputs),
}


def route(path: str, method: str | None) -> Entry | None:
    """``logged-models/<id>`` (GET, PATCH finalize, DELETE), ``…/tags`` (PATCH), ``…/tags/<key>``
    (DELETE), ``…/params`` (POST); an entry with another method answers 405."""
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != "logged-models" or path in ENDPOINTS:
        return None
    model_id, rest = parts[1], parts[2:]
    if not rest:
        by_method: dict[str, Any] = {"GET": get, "PATCH": finalize, "DELETE": delete}
    elif rest == ["tags"]:
        by_method = {"PATCH": set_tags}
    elif len(rest) == 2 and rest[0] == "tags":
        by_method = {"DELETE": functools.partial(delete_tag, key=rest[1])}
    elif rest == ["params"]:
        by_method = {"POST": log_params}
    else:
        return None
    chosen = method if method in by_method else next(iter(by_method))
    return chosen, functools.partial(by_method[chosen], model_id=model_id)
