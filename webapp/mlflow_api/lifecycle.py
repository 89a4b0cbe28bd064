"""MLflow's calls that change what is already there (docs/mlflow.md#lifecycle): delete and restore
runs and experiments, rename an experiment, experiment tags, delete a run's tag, and a run's
dataset inputs. Deleting through MLflow marks the item deleted for MLflow's answers and searches
only (webapp.mlflow_api.models); our own pages keep showing it.

Handlers take (caller, body, request body bytes) as in webapp.mlflow_api.views.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from webapp.experiments.models import Experiment
from webapp.mlflow_api import validation as check
from webapp.mlflow_api.access import Caller, check_can_create, get_experiment_for_caller, get_run_for_caller
from webapp.mlflow_api.entities import RUN_NAME_TAG
from webapp.mlflow_api.errors import RESOURCE_ALREADY_EXISTS, MlflowError, invalid, not_found
from webapp.mlflow_api.models import DeletedExperiment, DeletedRun, ExperimentTag, RunDataset

Body = dict[str, Any]


# -- runs ------------------------------------------------------------------------------------------


def delete_run(caller: Caller, body: Body, raw: bytes) -> Body:
    run = get_run_for_caller(caller, check.required_string(body, "run_id"), write=True, ended_ok=True)
    DeletedRun.objects.get_or_create(run=run)
    return {}


def restore_run(caller: Caller, body: Body, raw: bytes) -> Body:
    run = get_run_for_caller(caller, check.required_string(body, "run_id"), write=True, ended_ok=True)
    DeletedRun.objects.filter(run=run).delete()
    return {}


def delete_tag(caller: Caller, body: Body, raw: bytes) -> Body:
    run_id = check.required_string(body, "run_id")
    key = check.required_string(body, "key")
    run = get_run_for_caller(caller, run_id, write=True)
    deleted, _ = run.logged.tags().filter(key=key).delete() if key != RUN_NAME_TAG else (0, {})
    if not deleted:
        raise not_found(f"No tag with name: {key} in run with id {run_id}")
    return {}


def log_inputs(caller: Caller, body: Body, raw: bytes) -> Body:
    run = get_run_for_caller(caller, check.required_string(body, "run_id"), write=True)
    datasets = [_dataset(item, f"datasets[{i}]") for i, item in enumerate(check.objects(body, "datasets"))]
    for fields in datasets:
        RunDataset.objects.update_or_create(
            run=run, name=fields.pop("name"), digest=fields.pop("digest"), defaults=fields
        )
    return {}


# RunDataset's columns (MLflow's own limits for these fields).
_DATASET_LIMITS = {"name": 500, "digest": 36, "source_type": 36, "source": 65_535}


def _dataset(item: dict[str, Any], path: str) -> dict[str, Any]:
    dataset = item.get("dataset")
    if not isinstance(dataset, dict):
        raise MlflowError(check.missing_value(f"{path}.dataset"))
    fields: dict[str, Any] = {}
    for name, limit in _DATASET_LIMITS.items():
        fields[name] = check.required_string(dataset, name)
        if len(fields[name]) > limit:
            raise invalid(check.exceeds_maximum_length(f"{path}.dataset.{name}", limit))
    fields.update(schema=str(dataset.get("schema") or ""), profile=str(dataset.get("profile") or ""))
    tags = item.get("tags") or []
    fields["tags"] = {str(t.get("key")): str(t.get("value")) for t in tags if isinstance(t, dict)}
    return fields


# -- experiments -----------------------------------------------------------------------------------


def _writable_experiment(caller: Caller, body: Body) -> Experiment:
    experiment = get_experiment_for_caller(caller, check.required_string(body, "experiment_id"))
    check_can_create(caller)
    return experiment


def delete_experiment(caller: Caller, body: Body, raw: bytes) -> Body:
    DeletedExperiment.objects.get_or_create(experiment=_writable_experiment(caller, body))
    return {}


def restore_experiment(caller: Caller, body: Body, raw: bytes) -> Body:
    DeletedExperiment.objects.filter(experiment=_writable_experiment(caller, body)).delete()
    return {}


def update_experiment(caller: Caller, body: Body, raw: bytes) -> Body:
    experiment = _writable_experiment(caller, body)
    name = check.experiment_name(check.required_string(body, "new_name"))
    try:
        with transaction.atomic():
            Experiment.objects.filter(pk=experiment.pk).update(name=name)
    except IntegrityError:
        raise MlflowError(f"Experiment(name={name}) already exists.", RESOURCE_ALREADY_EXISTS) from None
    return {}


def set_experiment_tag(caller: Caller, body: Body, raw: bytes) -> Body:
    experiment = _writable_experiment(caller, body)
    check.required_string(body, "key")
    key, value = check.tag(body.get("key"), body.get("value"))
    set_experiment_tags(experiment, [(key, value)])
    return {}


def set_experiment_tags(experiment: Experiment, tags: list[tuple[str, str]]) -> None:
    for key, value in tags:
        ExperimentTag.objects.update_or_create(experiment=experiment, key=key, defaults={"value": value})


def delete_experiment_tag(caller: Caller, body: Body, raw: bytes) -> Body:
    experiment = _writable_experiment(caller, body)
    key = check.required_string(body, "key")
    deleted, _ = ExperimentTag.objects.filter(experiment=experiment, key=key).delete()
    if not deleted:
        raise not_found(f"No tag with name: {key} in experiment with id {experiment.pk}")
    return {}


ENDPOINTS: dict[str, tuple[str, Any]] = {
    "runs/delete": ("POST", delete_run),
    "runs/restore": ("POST", restore_run),
    "runs/delete-tag": ("POST", delete_tag),
    "runs/log-inputs": ("POST", log_inputs),
    "experiments/delete": ("POST", delete_experiment),
    "experiments/restore": ("POST", restore_experiment),
    "experiments/update": ("POST", update_experiment),
    "experiments/set-experiment-tag": ("POST", set_experiment_tag),
    "experiments/delete-experiment-tag": ("POST", delete_experiment_tag),
}
