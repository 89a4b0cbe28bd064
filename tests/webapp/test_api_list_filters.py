"""The REST list endpoints' query filters (runs, evaluations, datasets): each narrows the team's
list, an empty value filters nothing, and they combine."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest
from django.http import HttpResponse
from django.test import Client

from webapp.accounts.models import ApiToken
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus


@pytest.fixture
def api_get(client: Client, personas: Any) -> Any:
    """GET a team list with query parameters, as alice."""
    token = ApiToken.issue(personas["alice"], "tests")[1]

    def get(path: str, **query: Any) -> HttpResponse:
        return client.get(f"/api/t/acme/{path}?{urlencode(query)}", HTTP_AUTHORIZATION=f"Bearer {token}")

    return get


@pytest.fixture
def listed(api_get: Any) -> Any:
    """A team list's items."""

    def items(path: str, **query: Any) -> list[dict[str, Any]]:
        response = api_get(path, **query)
        assert response.status_code == 200, response.content
        return response.json()["items"]

    return items


@pytest.fixture
def other_experiment(experiment: Experiment) -> Experiment:
    return Experiment.objects.create(team=experiment.team, name="other", task="gsm8k", preset="grpo")


def test_the_runs_list_filters_by_status_experiment_and_name(
    api_get: Any, listed: Any, experiment: Experiment, other_experiment: Experiment
) -> None:
    team = experiment.team
    Run.objects.create(experiment=experiment, team=team, seed=1, name="Lr Sweep a", status=RunStatus.RUNNING)
    Run.objects.create(experiment=experiment, team=team, seed=2, name="baseline", status=RunStatus.FAILED)
    Run.objects.create(
        experiment=other_experiment, team=team, seed=1, name="lr sweep b", status=RunStatus.RUNNING
    )

    def names(**query: Any) -> list[str]:
        return sorted(run["name"] for run in listed("runs", **query))

    assert names(status="", q="") == ["Lr Sweep a", "baseline", "lr sweep b"]
    assert names(status="running") == ["Lr Sweep a", "lr sweep b"]
    assert names(experiment=other_experiment.pk) == ["lr sweep b"]
    assert names(q="SWEEP") == ["Lr Sweep a", "lr sweep b"]
    assert names(status="running", experiment=experiment.pk, q="sweep") == ["Lr Sweep a"]
    # Postgres stores no NUL: one in the name filter is a 400 naming it, not a 500.
    refused = api_get("runs", q="sw\x00eep")
    assert refused.status_code == 400 and refused.json()["field"] == "q"


def test_the_evaluations_list_filters_by_experiment(
    listed: Any, experiment: Experiment, other_experiment: Experiment
) -> None:
    team = experiment.team
    mine = Run.objects.create(experiment=experiment, team=team, seed=1, kind=RunKind.EVALUATION)
    theirs = Run.objects.create(experiment=other_experiment, team=team, seed=1, kind=RunKind.EVALUATION)
    Run.objects.create(experiment=experiment, team=team, seed=2)  # a training run is never listed

    assert sorted(e["id"] for e in listed("evaluations")) == [mine.pk, theirs.pk]
    assert [e["id"] for e in listed("evaluations", experiment=experiment.pk)] == [mine.pk]


def test_the_datasets_list_finds_a_dataset_by_its_hash_in_any_case(listed: Any, personas: Any) -> None:
    team = personas["acme"]
    found = Dataset.objects.create(team=team, name="found", sha256="ab" * 32, size_bytes=10)
    Dataset.objects.create(team=team, name="other", sha256="cd" * 32, size_bytes=10)

    assert [d["id"] for d in listed("datasets", sha256="AB" * 32)] == [found.pk]
    assert len(listed("datasets", sha256="")) == 2
