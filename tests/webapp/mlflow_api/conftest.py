"""The official MLflow client against the live test server: tokens, a launched run, and the
client's global state reset between tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def tracking(
    live_server: Any, transactional_db: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], str]]:
    """``use(token)`` points the client at /mlflow/ with that token and returns the tracking URI."""
    import mlflow

    uri = f"{live_server.url}/mlflow"
    # The client retries 5xx and 429 with backoff; every error here must be a prompt 4xx instead.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

    def use(token: str, path: str = "") -> str:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri + path)
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
        mlflow.set_tracking_uri(uri + path)
        return uri + path

    yield use
    while mlflow.active_run() is not None:
        mlflow.end_run()
    # set_experiment remembers the experiment in the process and in os.environ, behind monkeypatch.
    mlflow.tracking.fluent._active_experiment_id = None
    for name in ("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        os.environ.pop(name, None)


@pytest.fixture
def tokens(personas: dict[str, Any]) -> dict[str, str]:
    from webapp.accounts.models import ApiToken

    return {name: ApiToken.issue(personas[name], "mlflow")[1] for name in ("alice", "bob", "charlie")}


@pytest.fixture
def launched_run(personas: dict[str, Any]) -> Any:
    """A run our launcher started (local executor, claimed by its trainer), as verl's would be."""
    from webapp.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(
        team=personas["acme"], name="gsm8k verl", task="gsm8k", preset="grpo"
    )
    run = Run.objects.create(
        experiment=experiment, team=personas["acme"], seed=1, name="launched", executor="local"
    )
    run.enqueue()
    run.mark_starting("4242")
    run.claim("verl", "verl")
    return run
