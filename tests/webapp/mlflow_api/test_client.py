"""The official MLflow client (mlflow-skinny, pinned) logging into /mlflow/ of the live server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test import Client

from webapp.experiments.models import Experiment, Run, RunStatus

STEPS = 100
BATCH = 1000


def _point_counts(run: Run) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT k.name, count(*) FROM results_metricpoint p JOIN results_metrickey k ON k.id = p.key_id "
            "WHERE p.run_id = %s GROUP BY k.name",
            [run.pk],
        )
        return dict(cursor.fetchall())


def _api(token: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def _log_a_training_run(use: Callable[[str], str], token: str) -> tuple[Any, list[Any]]:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    use(token)
    mlflow.set_experiment("agent-r1 gsm8k")
    batch = [Metric("val/gsm8k/acc", i / BATCH, 1_700_000_000_000 + i, i) for i in range(BATCH)]
    with mlflow.start_run(run_name="grpo <seed 1>") as active:
        mlflow.log_params({"algorithm": "grpo", "actor/lr": "1e-6", "note": "<b>bold</b>"})
        for step in range(STEPS):
            mlflow.log_metrics(
                {"critic/score/mean": step / STEPS, "actor/pg_loss": 1 - step / STEPS}, step=step
            )
        MlflowClient().log_batch(active.info.run_id, metrics=batch)
    return active, batch


def test_a_client_run_becomes_an_external_run_with_its_params_and_curves(
    tracking: Callable[[str], str], tokens: dict[str, str], personas: dict[str, Any]
) -> None:
    active, _batch = _log_a_training_run(tracking, tokens["alice"])

    run = Run.objects.select_related("experiment").get(mlflow_run_id=active.info.run_id)
    assert (run.is_external, run.executor, run.status, run.name) == (
        True,
        "external",
        RunStatus.SUCCEEDED,
        "grpo <seed 1>",
    )
    assert run.experiment.name == "agent-r1 gsm8k" and run.experiment.external
    assert run.experiment.team == personas["acme"] and run.finished_at is not None
    assert dict(run.logged.params().values_list("key", "value")) == {
        "algorithm": "grpo",
        "actor/lr": "1e-6",
        "note": "<b>bold</b>",
    }
    # verl's reward key is stored under ours as well; the client's own key stays for it to read back.
    assert _point_counts(run) == {
        "critic/score/mean": STEPS, "reward/mean": STEPS, "actor/pg_loss": STEPS, "val/gsm8k/acc": BATCH,
    }  # fmt: skip
    assert run.step == BATCH - 1
    # The client's own tags are kept (mlflow.user is the OS user); the name lives on the run.
    tags = dict(run.logged.tags().values_list("key", "value"))
    assert "mlflow.user" in tags and "mlflow.source.name" in tags and "mlflow.runName" not in tags


def test_the_run_its_params_and_curves_show_in_our_api_and_pages(
    tracking: Callable[[str], str], tokens: dict[str, str], personas: dict[str, Any]
) -> None:
    active, _batch = _log_a_training_run(tracking, tokens["alice"])
    run = Run.objects.get(mlflow_run_id=active.info.run_id)
    api = _api(tokens["bob"])

    listed = api.get("/api/t/acme/runs", {"experiment": run.experiment_id}).json()["items"]
    assert [(r["id"], r["external"], r["mlflow_run_id"]) for r in listed] == [
        (run.pk, True, run.mlflow_run_id)
    ]
    detail = api.get(f"/api/t/acme/runs/{run.pk}").json()
    assert detail["params"] == {"actor/lr": "1e-6", "algorithm": "grpo", "note": "<b>bold</b>"}
    assert detail["status"] == "succeeded"
    curve = api.get(f"/api/t/acme/runs/{run.pk}/metrics/curve", {"key": "actor/pg_loss"}).json()
    assert curve["series"][0]["step"] == list(range(STEPS))
    assert curve["series"][0]["value"][:3] == [1.0, 0.99, 0.98]
    points = api.get(
        f"/api/t/acme/runs/{run.pk}/metrics/points", {"key": "val/gsm8k/acc", "limit": 5000}
    ).json()
    assert points["step"] == list(range(BATCH)) and points["ts"][1] == 1_700_000_000.001

    browser = Client()
    browser.force_login(personas["bob"])
    page = browser.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "actor/lr" in page and "1e-6" in page and run.mlflow_run_id in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    experiment_page = browser.get(f"/t/acme/experiments/{run.experiment_id}/").content.decode()
    assert "grpo &lt;seed 1&gt;" in experiment_page and "external" in experiment_page


def test_replaying_the_same_batch_changes_nothing(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    active, batch = _log_a_training_run(tracking, tokens["alice"])
    run = Run.objects.get(mlflow_run_id=active.info.run_id)
    before = _point_counts(run)
    MlflowClient().log_batch(active.info.run_id, metrics=batch)
    # The same (key, step) pairs with other values and times: still nothing new, the first value stays.
    shifted = [Metric(m.key, m.value + 5, m.timestamp + 1, m.step) for m in batch]
    MlflowClient().log_batch(active.info.run_id, metrics=shifted)
    assert _point_counts(run) == before
    history = MlflowClient().get_metric_history(active.info.run_id, "val/gsm8k/acc")
    assert (
        len(history) == BATCH
        and history[10].value == 10 / BATCH
        and history[10].timestamp == 1_700_000_000_010
    )


def test_the_client_reads_back_runs_experiments_and_history(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    import mlflow
    from mlflow import MlflowClient

    active, _batch = _log_a_training_run(tracking, tokens["alice"])
    client = MlflowClient()
    fetched = client.get_run(active.info.run_id)
    assert fetched.info.status == "FINISHED" and fetched.info.run_name == "grpo <seed 1>"
    assert fetched.data.params["actor/lr"] == "1e-6"
    assert fetched.data.metrics["actor/pg_loss"] == 1 - (STEPS - 1) / STEPS
    assert fetched.data.tags["mlflow.runName"] == "grpo <seed 1>"
    experiment = client.get_experiment_by_name("agent-r1 gsm8k")
    assert experiment is not None and client.get_experiment(experiment.experiment_id).name == "agent-r1 gsm8k"
    assert [e.name for e in client.search_experiments(filter_string="name LIKE 'agent-r1%'")] == [
        "agent-r1 gsm8k"
    ]
    found = mlflow.search_runs(
        [experiment.experiment_id], filter_string="params.algorithm = 'grpo'", output_format="list"
    )
    assert [r.info.run_id for r in found] == [active.info.run_id]
    assert client.search_runs([experiment.experiment_id], filter_string="metrics.actor/pg_loss > 0.5") == []
    history = client.get_metric_history(active.info.run_id, "critic/score/mean")
    assert [m.step for m in history] == list(range(STEPS)) and history[-1].value == (STEPS - 1) / STEPS


def test_a_run_started_without_an_experiment_goes_to_the_teams_default_experiment(
    tracking: Callable[[str], str], tokens: dict[str, str], personas: dict[str, Any]
) -> None:
    import mlflow

    tracking(tokens["alice"])
    with mlflow.start_run() as active:
        mlflow.log_metric("loss", 0.5)
    run = Run.objects.get(mlflow_run_id=active.info.run_id)
    assert run.experiment.name == "Default" and run.experiment.team == personas["acme"]
    assert Experiment.objects.filter(name="Default").count() == 1


def test_a_launched_run_attaches_by_its_mlflow_run_id_and_keeps_its_status(
    tracking: Callable[[str], str], launched_run: Run, personas: dict[str, Any]
) -> None:
    import mlflow

    tracking(launched_run.issue_token())
    launched_run.refresh_from_db()
    beat_before = launched_run.heartbeat_at
    with mlflow.start_run(run_id=launched_run.mlflow_run_id) as active:
        assert active.info.experiment_id == str(launched_run.experiment_id)
        for step in range(1, 6):
            mlflow.log_metrics({"critic/score/mean": step / 10, "actor/pg_loss": 0.1}, step=step)
    run = Run.objects.get(pk=launched_run.pk)
    assert run.status == RunStatus.RUNNING and run.finished_at is None and not run.is_external
    assert run.step == 5 and run.heartbeat_at > beat_before and run.progress_at >= run.heartbeat_at
    assert _point_counts(run) == {"critic/score/mean": 5, "reward/mean": 5, "actor/pg_loss": 5}
    browser = Client()
    browser.force_login(personas["alice"])
    page = browser.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert run.mlflow_run_id in page and "Cancel run" in page and "Configuration" in page


def test_every_run_has_its_own_mlflow_run_id_also_after_the_migration(launched_run: Run) -> None:
    import importlib

    from django.apps import apps

    migration = importlib.import_module("webapp.experiments.migrations.0002_mlflow_tracking")
    others = [
        Run.objects.create(experiment=launched_run.experiment, team=launched_run.team) for _ in range(3)
    ]
    assert len({r.mlflow_run_id for r in [launched_run, *others]}) == 4
    before = set(Run.objects.values_list("mlflow_run_id", flat=True))
    migration.give_each_run_its_own_id(apps, None)
    after = list(Run.objects.values_list("mlflow_run_id", flat=True))
    assert len(set(after)) == 4 and not before & set(after)
    assert all(len(value) == 32 and int(value, 16) >= 0 for value in after)
