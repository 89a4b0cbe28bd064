"""What a notebook and a registry user do with the official client, against the live server
(docs/mlflow.md#how-close-to-mlflow): the best run by a metric, deleting and restoring, experiment
tags, datasets, and a flavour's log_model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from webapp.experiments.models import Run


def _three_runs(client: Any, experiment_id: str) -> dict[str, str]:
    ids = {}
    for name, loss, lr in (("a", 0.5, "0.1"), ("b", 0.3, "0.01"), ("c", 0.9, "0.001")):
        run = client.create_run(experiment_id, run_name=name, tags={"stage": "rl" if name != "a" else "sft"})
        client.log_metric(run.info.run_id, "loss", loss, step=1)
        client.log_param(run.info.run_id, "lr", lr)
        ids[name] = run.info.run_id
    return ids


def _names(runs: Any) -> list[str]:
    return [run.info.run_name for run in runs]


def test_a_notebook_finds_the_best_run_and_filters_by_ids(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    from mlflow import MlflowClient

    tracking(tokens["alice"])
    client = MlflowClient()
    experiment_id = client.create_experiment("notebook")
    ids = _three_runs(client, experiment_id)

    assert _names(client.search_runs([experiment_id], order_by=["metrics.loss DESC"])) == ["c", "a", "b"]
    assert _names(client.search_runs([experiment_id], order_by=["params.lr"])) == ["c", "b", "a"]
    by_tag = client.search_runs([experiment_id], order_by=["tags.stage DESC", "attributes.run_name"])
    assert _names(by_tag) == ["a", "b", "c"]
    chosen = f"attributes.run_id IN ('{ids['a']}', '{ids['c']}')"
    assert sorted(_names(client.search_runs([experiment_id], filter_string=chosen))) == ["a", "c"]


def test_deleted_runs_and_experiments_leave_mlflows_searches_until_restored(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    tracking(tokens["alice"])
    client = MlflowClient()
    # The Default experiment is there before anything was logged.
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert client.get_experiment("0").name == "Default"
    experiment_id = client.create_experiment("lifecycle", tags={"team": "rl"})
    ids = _three_runs(client, experiment_id)

    client.delete_run(ids["c"])
    assert client.get_run(ids["c"]).info.lifecycle_stage == "deleted"
    assert sorted(_names(client.search_runs([experiment_id]))) == ["a", "b"]
    assert _names(client.search_runs([experiment_id], run_view_type=ViewType.DELETED_ONLY)) == ["c"]
    client.restore_run(ids["c"])
    assert len(client.search_runs([experiment_id], run_view_type=ViewType.ALL)) == 3
    assert Run.objects.filter(mlflow_run_id=ids["c"]).exists()  # our pages keep it either way

    client.set_tag(ids["a"], "note", "x")
    client.delete_tag(ids["a"], "note")
    assert "note" not in client.get_run(ids["a"]).data.tags
    client.set_experiment_tag(experiment_id, "owner", "alice")
    client.rename_experiment(experiment_id, "lifecycle v2")
    renamed = client.get_experiment_by_name("lifecycle v2")
    assert renamed.tags == {"team": "rl", "owner": "alice"}
    assert client.search_experiments(filter_string="tags.team = 'rl'")[0].name == "lifecycle v2"
    client.delete_experiment(experiment_id)
    assert [e.name for e in client.search_experiments(view_type=ViewType.DELETED_ONLY)] == ["lifecycle v2"]
    assert client.search_runs(["987654"]) == []  # an id of no experiment matches nothing, as on MLflow


class Doubler:
    """A pyfunc model, as a flavour's log_model stores one."""

    def predict(self, context: Any, model_input: list[int], params: Any = None) -> list[int]:
        return [2 * x for x in model_input]


def test_log_model_and_log_input_work_as_on_mlflow(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    import mlflow
    import mlflow.pyfunc
    from mlflow.entities import Dataset, DatasetInput, InputTag

    tracking(tokens["alice"])
    mlflow.set_experiment("models")
    with mlflow.start_run() as active:
        dataset = Dataset("gsm8k", "abc123", "local", '{"uri": "/data/gsm8k.parquet"}')
        context = [InputTag("mlflow.data.context", "training")]
        mlflow.MlflowClient().log_inputs(active.info.run_id, [DatasetInput(dataset, context)])
        info = mlflow.pyfunc.log_model(name="doubler", python_model=_as_python_model(Doubler()))
        mlflow.log_metric("accuracy", 0.75, step=1, model_id=info.model_id)

    model = mlflow.get_logged_model(info.model_id)
    assert (model.name, model.status.to_proto(), model.source_run_id) == (
        "doubler",
        2,  # LOGGED_MODEL_READY
        active.info.run_id,
    )
    assert [(m.key, m.value) for m in model.metrics] == [("accuracy", 0.75)]
    assert mlflow.pyfunc.load_model(f"models:/{info.model_id}").predict([1, 2]) == [2, 4]
    run = mlflow.get_run(active.info.run_id)
    assert [i.dataset.name for i in run.inputs.dataset_inputs] == ["gsm8k"]
    found = mlflow.search_logged_models(experiment_ids=[model.experiment_id], output_format="list")
    assert [m.model_id for m in found] == [info.model_id]


def _as_python_model(model: Doubler) -> Any:
    import mlflow.pyfunc

    class Wrapped(mlflow.pyfunc.PythonModel):
        def predict(self, context: Any, model_input: list[int], params: Any = None) -> list[int]:
            return model.predict(context, model_input, params)

    return Wrapped()


@pytest.fixture(autouse=True)
def _no_env_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """log_model would otherwise run pip to write the model's requirements (no network here)."""
    monkeypatch.setenv("MLFLOW_REQUIREMENTS_INFERENCE_TIMEOUT", "1")
