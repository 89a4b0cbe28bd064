"""What the MLflow calls change, on our models: one transaction per request.

Metrics go into the ingestion API's append-only store, keyed by (run, key, step): a replayed batch
stores nothing new. Unlike MLflow, a second value for a step of a key is not kept (the first one
logged wins), which is what makes replays idempotent.
"""

from __future__ import annotations

import contextlib
import hashlib

from django.db import transaction

from webapp.experiments.models import Experiment, Run, RunParam, RunStatus, RunTag
from webapp.mlflow_api.access import Caller
from webapp.mlflow_api.entities import OUR_STATUS, RUN_NAME_TAG, USER_TAG, from_ms
from webapp.mlflow_api.errors import RESOURCE_ALREADY_EXISTS, MlflowError, invalid
from webapp.mlflow_api.validation import Metrics
from webapp.results import metrics_store


def create_experiment(caller: Caller, name: str) -> Experiment:
    with transaction.atomic():
        # Race: two clients calling set_experiment(name) at once both miss get-by-name; the unique
        # (team, name) constraint lets one create it, and the other gets RESOURCE_ALREADY_EXISTS,
        # which MLflow's client answers by reading the experiment again.
        experiment, created = Experiment.objects.get_or_create(
            team=caller.team, name=name, defaults={"external": True, "created_by": caller.user}
        )
    if not created:
        raise MlflowError(f"Experiment(name={name}) already exists.", RESOURCE_ALREADY_EXISTS)
    return experiment


def create_run(
    caller: Caller,
    experiment: Experiment,
    run_name: str | None,
    start_time: int | None,
    tags: list[tuple[str, str]],
) -> Run:
    tag_name = next((value for key, value in tags if key == RUN_NAME_TAG), None)
    if run_name and tag_name and run_name != tag_name:
        raise invalid(
            "Both 'run_name' argument and 'mlflow.runName' tag are specified, but with different values "
            f"(run_name='{run_name}', mlflow.runName='{tag_name}')."
        )
    if caller.user is not None and not any(key == USER_TAG for key, _ in tags):
        tags = [*tags, (USER_TAG, caller.user_name)]
    with transaction.atomic():
        run = Run(
            experiment=experiment, team=experiment.team, external=True, executor="external",
            status=RunStatus.RUNNING, name=run_name or tag_name or "",
            started_at=from_ms(start_time) if start_time else None,
        )  # fmt: skip
        run.save()
        now = run.created
        Run.objects.filter(pk=run.pk).update(
            started_at=run.started_at or now,
            heartbeat_at=now,
            progress_at=now,
            name=run.name or f"run-{run.pk}",
        )
        set_tags(run, tags)
    run.refresh_from_db()
    return run


def log_batch(
    run: Run, metrics: Metrics, params: list[tuple[str, str]], tags: list[tuple[str, str]], body: bytes
) -> None:
    """Params, then metrics, then tags (MLflow's order); all or nothing."""
    # A metrics-only batch (every training step's) needs no outer transaction: write_points is one,
    # and skipping the savepoints a nested one costs saves round trips on the hot path.
    with transaction.atomic() if params or tags else contextlib.nullcontext():
        log_params(run, params)
        if metrics.key:
            # The batch id is the body's hash: the same request sent twice stores its points once
            # (and a different body repeating (key, step) pairs is deduplicated by the point table).
            batch_id = "mlflow-" + hashlib.sha256(body).hexdigest()[:57]
            metrics_store.write_points(run.pk, batch_id, metrics.points())
        set_tags(run, tags)
    if metrics.key:
        _count_as_progress(run, max(metrics.step))


def _count_as_progress(run: Run, step: int) -> None:
    """For a launched run, metrics are the trainer's sign of life (verl sends no heartbeats of its
    own): the stall watchdog sees it alive and progressing. External runs only move their counter."""
    if run.external:
        Run.objects.filter(pk=run.pk, step__lt=step).update(step=step)
    else:
        run.note_progress(step)


def log_params(run: Run, params: list[tuple[str, str]]) -> None:
    """New params are stored; a param logged again must keep its value (MLflow refuses a change)."""
    if not params:
        return
    wanted = dict(params)
    RunParam.objects.bulk_create(
        [RunParam(run=run, key=key, value=value) for key, value in wanted.items()], ignore_conflicts=True
    )
    # Read back after the insert: a concurrent writer's value for the same key is seen here.
    stored = dict(RunParam.objects.filter(run=run, key__in=list(wanted)).values_list("key", "value"))
    changed = [
        {"key": key, "old_value": stored[key], "new_value": value}
        for key, value in wanted.items()
        if stored.get(key) != value
    ]
    if not changed:
        return
    if len(params) == 1:
        first = changed[0]
        raise invalid(
            f"Changing param values is not allowed. Param with key='{first['key']}' was already logged with "
            f"value='{first['old_value']}' for run ID='{run.mlflow_run_id}'. Attempted logging new value "
            f"'{first['new_value']}'."
        )
    raise invalid(
        f"Changing param values is not allowed. Params were already logged='{changed}' for run "
        f"ID='{run.mlflow_run_id}'."
    )


def set_tags(run: Run, tags: list[tuple[str, str]]) -> None:
    """Tags are replaced when set again; the run name lives on Run.name, not in the tag table."""
    values: dict[str, str] = {}
    for key, value in tags:
        if key == RUN_NAME_TAG:
            Run.objects.filter(pk=run.pk).update(name=value)
        else:
            values[key] = value  # a key repeated in one batch: the last value wins
    if values:
        RunTag.objects.bulk_create(
            [RunTag(run=run, key=key, value=value) for key, value in values.items()],
            update_conflicts=True,
            unique_fields=["run", "key"],
            update_fields=["value"],
        )


def update_run(run: Run, status: str | None, end_time: int | None, run_name: str | None) -> Run:
    our_status = OUR_STATUS.get(status) if status else None
    if status and our_status is None:
        raise invalid(f"Invalid value \"{status}\" for parameter 'status' supplied.")
    run.update_from_mlflow(our_status, from_ms(end_time), run_name)
    return run


def metric_history(run: Run, key: str, after_step: int, limit: int | None) -> list[tuple[int, float, float]]:
    """(step, value, ts) of one key after a step, in step order."""
    return metrics_store.raw_points(run.pk, key, after_step + 1, metrics_store.INT4_MAX, limit or 2**62)
