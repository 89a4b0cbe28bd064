"""Who may touch what through /mlflow/, and MLflow's limits with its error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from webapp.experiments.models import Experiment, LoggedValue, Run
from webapp.ingestion.models import MetricPoint

API = "/api/2.0/mlflow"


def _call(uri: str, token: str | None, method: str, path: str, body: dict[str, Any]) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if method == "GET":
        return requests.get(f"{uri}{API}/{path}", params=body, headers=headers, timeout=30)
    return requests.post(f"{uri}{API}/{path}", json=body, headers=headers, timeout=30)


@pytest.fixture
def acme_run(tracking: Callable[[str], str], tokens: dict[str, str]) -> Any:
    """An experiment and a run alice made with the client, with one param and one metric."""
    from mlflow import MlflowClient

    tracking(tokens["alice"])
    client = MlflowClient()
    experiment_id = client.create_experiment("acme secret")
    run = client.create_run(experiment_id, run_name="r")
    client.log_param(run.info.run_id, "lr", "0.1")
    client.log_metric(run.info.run_id, "loss", 1.0, step=0)
    return run


def test_another_teams_token_finds_nothing_and_writes_nothing(
    tracking: Callable[[str], str], tokens: dict[str, str], acme_run: Any
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = tracking(tokens["charlie"])
    experiment_id, run_id = acme_run.info.experiment_id, acme_run.info.run_id
    for method, path, body in [
        ("GET", "experiments/get", {"experiment_id": experiment_id}),
        ("GET", "experiments/get-by-name", {"experiment_name": "acme secret"}),
        ("GET", "runs/get", {"run_id": run_id}),
        ("GET", "metrics/get-history", {"run_id": run_id, "metric_key": "loss"}),
        ("POST", "runs/log-batch", {"run_id": run_id, "metrics": [{"key": "x", "value": 1, "timestamp": 1}]}),
        ("POST", "runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "9"}),
        ("POST", "runs/set-tag", {"run_id": run_id, "key": "t", "value": "v"}),
        ("POST", "runs/update", {"run_id": run_id, "status": "KILLED"}),
        ("POST", "runs/create", {"experiment_id": experiment_id}),
    ]:
        response = _call(uri, tokens["charlie"], method, path, body)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST", path
    assert (
        MlflowClient().search_runs([]) == [] and MlflowClient().get_experiment_by_name("acme secret") is None
    )
    with pytest.raises(MlflowException) as raised:
        MlflowClient().log_metric(run_id, "loss", 5.0, step=1)
    assert raised.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    run = Run.objects.get(mlflow_run_id=run_id)
    assert run.status == "running" and MetricPoint.objects.filter(run=run).count() == 1
    assert not run.logged.tags().filter(key="t").exists()


def test_without_a_valid_token_the_answer_is_401_in_mlflows_shape(
    tracking: Callable[[str], str], acme_run: Any
) -> None:
    uri = tracking("sk_not-a-token")
    for token in (None, "sk_not-a-token", "r1_not-a-run-token"):
        response = _call(uri, token, "GET", "runs/get", {"run_id": acme_run.info.run_id})
        assert response.status_code == 401 and response.json()["error_code"] == "UNAUTHENTICATED"


def test_a_viewer_reads_but_cannot_log(
    tracking: Callable[[str], str], tokens: dict[str, str], personas: dict[str, Any], acme_run: Any
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    personas["acme"].add_member(personas["charlie"], "viewer")
    tracking(tokens["charlie"], "/t/acme")  # charlie's first team is his own: name Acme's in the URI
    assert MlflowClient().get_run(acme_run.info.run_id).data.params == {"lr": "0.1"}
    with pytest.raises(MlflowException) as raised:
        MlflowClient().log_metric(acme_run.info.run_id, "loss", 5.0, step=1)
    assert raised.value.error_code == "PERMISSION_DENIED"


def test_a_run_token_reaches_its_own_run_and_experiment_only(
    tracking: Callable[[str], str], tokens: dict[str, str], launched_run: Run, acme_run: Any
) -> None:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    run_token = launched_run.issue_token()
    uri = tracking(run_token)
    client = MlflowClient()
    assert client.get_run(launched_run.mlflow_run_id).info.experiment_id == str(launched_run.experiment_id)
    assert client.get_experiment(str(launched_run.experiment_id)).name == "gsm8k verl"
    assert client.get_experiment_by_name("gsm8k verl") is not None
    assert client.get_experiment_by_name("acme secret") is None
    with pytest.raises(MlflowException) as raised:
        client.get_run(acme_run.info.run_id)
    assert raised.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    for path, body in [
        ("experiments/create", {"name": "new"}),
        ("runs/create", {"experiment_id": str(launched_run.experiment_id)}),
    ]:
        response = _call(uri, run_token, "POST", path, body)
        assert response.status_code == 403 and response.json()["error_code"] == "PERMISSION_DENIED"
    assert not Experiment.objects.filter(name="new").exists()


@pytest.mark.parametrize(
    ("metrics", "params", "tags", "message"),
    [
        (1001, 0, 0, "A batch logging request can contain at most 1000 metrics. Got 1001 metrics."),
        (0, 101, 0, "A batch logging request can contain at most 100 params. Got 101 params."),
        (0, 0, 101, "A batch logging request can contain at most 100 tags. Got 101 tags."),
        (950, 60, 0, "at most 1000 metrics, params, and tags. Got 1010 metrics, params, and tags."),
    ],
)
def test_a_batch_over_mlflows_limits_is_refused_whole(
    tracking: Callable[[str], str], tokens: dict[str, str], acme_run: Any,
    metrics: int, params: int, tags: int, message: str,
) -> None:  # fmt: skip
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException
    from mlflow.tracking._tracking_service.utils import _get_store

    tracking(tokens["alice"])
    store = _get_store()  # the REST store itself: the client's batching would split the batch
    with pytest.raises(MlflowException) as raised:
        store.log_batch(
            acme_run.info.run_id,
            metrics=[Metric("m", 1.0, 1, i) for i in range(metrics)],
            params=[Param(f"p{i}", "v") for i in range(params)],
            tags=[RunTag(f"t{i}", "v") for i in range(tags)],
        )
    assert raised.value.error_code == "INVALID_PARAMETER_VALUE" and message in raised.value.message
    run = Run.objects.get(mlflow_run_id=acme_run.info.run_id)
    assert MetricPoint.objects.filter(run=run).count() == 1 and run.logged.params().count() == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metrics": [{"key": "a#b", "value": 1, "timestamp": 1}]},
            "Invalid value \"a#b\" for parameter 'metrics[0].name'",
        ),
        (
            {"metrics": [{"key": "k" * 251, "value": 1, "timestamp": 1}]},
            "'Metric name' exceeds the maximum length of 250",
        ),
        (
            {"metrics": [{"key": "ok", "value": "high", "timestamp": 1}]},
            "for parameter 'metrics[0].value' supplied",
        ),
        (
            {"metrics": [{"key": "ok", "value": 1}]},
            "Missing value for required parameter 'metrics[0].timestamp'",
        ),
        ({"metrics": [{"key": "ok", "value": 1, "timestamp": -1}]}, "Timestamp must be a nonnegative long"),
        ({"metrics": [{"key": "../up", "value": 1, "timestamp": 1}]}, "must not resolve to other names"),
        (
            {"params": [{"key": "p" * 251, "value": "v"}]},
            "'Param key' exceeds the maximum length of 250 characters",
        ),
        ({"params": [{"key": "a", "value": "1"}, {"key": "a", "value": "2"}]}, "Duplicate parameter keys"),
        ({"tags": [{"key": "t" * 251, "value": "v"}]}, "'tags[0].key' exceeds the maximum length of 250"),
        ({"metrics": "nope"}, "Invalid value \"nope\" for parameter 'metrics' supplied"),
    ],
)
def test_bad_input_gets_mlflows_400(
    tracking: Callable[[str], str], tokens: dict[str, str], acme_run: Any, body: dict[str, Any], message: str
) -> None:
    uri = tracking(tokens["alice"])
    response = _call(uri, tokens["alice"], "POST", "runs/log-batch", {"run_id": acme_run.info.run_id, **body})
    assert response.status_code == 400, response.text
    assert (
        response.json()["error_code"] == "INVALID_PARAMETER_VALUE" and message in response.json()["message"]
    )


def test_a_param_keeps_its_first_value_and_long_values_are_cut_as_mlflow_does(
    tracking: Callable[[str], str], tokens: dict[str, str], acme_run: Any
) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import Param
    from mlflow.exceptions import MlflowException

    tracking(tokens["alice"])
    client = MlflowClient()
    client.log_param(acme_run.info.run_id, "lr", "0.1")  # the same value again is fine
    with pytest.raises(MlflowException) as raised:
        client.log_param(acme_run.info.run_id, "lr", "0.2")
    assert (
        "Changing param values is not allowed. Param with key='lr' was already logged with value='0.1'"
        in str(raised.value)
    )
    with pytest.raises(MlflowException, match="Params were already logged="):
        client.log_batch(acme_run.info.run_id, params=[Param("lr", "0.3"), Param("other", "x")])
    assert not LoggedValue.objects.params().filter(key="other").exists()  # the batch was refused whole
    client.log_param(acme_run.info.run_id, "prompt", "x" * 7000)
    assert len(LoggedValue.objects.params().get(key="prompt").value) == 6000


def test_unknown_calls_answer_endpoint_not_found(
    tracking: Callable[[str], str], tokens: dict[str, str]
) -> None:
    uri = tracking(tokens["alice"])
    # Of MLflow's 3.0 trace calls, logging and reading traces are served (docs/mlflow.md#traces).
    headers = {"Authorization": f"Bearer {tokens['alice']}"}
    response = requests.post(
        f"{uri}/api/3.0/mlflow/traces/tr-1/assessments", json={}, headers=headers, timeout=30
    )
    assert response.status_code == 404 and response.json()["error_code"] == "ENDPOINT_NOT_FOUND"
    response = _call(uri, tokens["alice"], "POST", "registered-models/create", {"name": "m"})
    assert response.status_code == 404 and response.json()["error_code"] == "ENDPOINT_NOT_FOUND"


def test_the_history_comes_in_pages_even_when_all_is_asked_and_the_client_reads_every_page(
    tracking: Callable[[str], str], tokens: dict[str, str], acme_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from webapp.mlflow_api import views

    monkeypatch.setattr(views, "HISTORY_PAGE_SIZE", 10)  # 25,000 in production
    uri = tracking(tokens["alice"])
    run_id = acme_run.info.run_id
    client = MlflowClient()
    client.log_batch(run_id, metrics=[Metric("loss", s / 2, 1_700_000_000_000 + s, s) for s in range(1, 25)])
    body = {"run_id": run_id, "metric_key": "loss"}
    first = _call(uri, tokens["alice"], "GET", "metrics/get-history", body).json()
    assert [m["step"] for m in first["metrics"]] == list(range(10)) and first["next_page_token"]
    asked = _call(uri, tokens["alice"], "GET", "metrics/get-history", {**body, "max_results": 5000}).json()
    assert len(asked["metrics"]) == 10 and asked["next_page_token"]
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == list(range(25))
