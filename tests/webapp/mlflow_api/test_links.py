"""The "View run at ..." links the MLflow client prints open our run and experiment pages."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.conftest import PASSWORD
from webapp.experiments.models import EXTERNAL_EXECUTOR, Experiment, Run


def _client(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


@pytest.fixture
def external_run(personas: dict[str, Any]) -> Run:
    experiment = Experiment.objects.create(team=personas["acme"], name="from mlflow", external=True)
    return Run.objects.create(
        experiment=experiment, team=personas["acme"], name="client-run", executor=EXTERNAL_EXECUTOR
    )


@pytest.mark.django_db
def test_a_run_link_opens_the_runs_page_for_its_team(external_run: Run) -> None:
    response = _client("bob").get(
        "/mlflow/open/", {"experiment": external_run.experiment_id, "run": external_run.mlflow_run_id}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/t/{external_run.team.slug}/runs/{external_run.pk}/"
    response = _client("bob").get("/mlflow/open/", {"experiment": external_run.experiment_id, "run": ""})
    assert response["Location"] == f"/t/{external_run.team.slug}/experiments/{external_run.experiment_id}/"


@pytest.mark.django_db
def test_an_outsider_following_the_link_finds_nothing(external_run: Run) -> None:
    outsider = _client("charlie")
    assert outsider.get("/mlflow/open/", {"run": external_run.mlflow_run_id}).status_code == 404
    assert outsider.get("/mlflow/open/", {"experiment": external_run.experiment_id}).status_code == 404
    assert outsider.get("/mlflow/open/", {"experiment": "not-a-number"}).status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_printed_link_lands_on_the_run_page_in_a_browser(
    external_run: Run, login: Any, live_server: Any
) -> None:
    page = login("bob")
    link = f"{live_server.url}/mlflow/#/experiments/{external_run.experiment_id}/runs/{external_run.mlflow_run_id}"
    page.goto(link)
    page.wait_for_url(f"**/runs/{external_run.pk}/")
    assert "client-run" in page.inner_text("h1")
