"""The experiments page: its title is text only, the sweeps and the team's run limit sit in its body, and
an experiment's evaluations are not counted among its runs."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from webapp.experiments.models import Experiment, Run, RunKind, RunStatus

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("quick_passwords")]


def test_the_title_is_plain_text_and_the_run_limit_is_in_the_body(personas: Any) -> None:
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(f"/t/{personas['acme'].slug}/experiments/").content.decode()
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    assert title is not None and "<" not in title.group(1) and "Runs at once" not in title.group(1)
    assert page.count('id="run-limit"') == 1


def test_an_experiments_evaluations_are_counted_apart_from_its_runs(personas: Any) -> None:
    experiment = Experiment.objects.create(team=personas["acme"], name="counted", task="gsm8k", preset="grpo")
    trained = Run.objects.create(
        experiment=experiment, team=experiment.team, seed=1, status=RunStatus.SUCCEEDED
    )
    Run.objects.create(experiment=experiment, team=experiment.team, seed=1, status=RunStatus.SUCCEEDED,
                       kind=RunKind.EVALUATION, evaluated_run=trained, evaluated_step=2)  # fmt: skip
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(f"/t/{personas['acme'].slug}/experiments/").content.decode()
    row = re.search(r"counted</a>.*?</tr>", page, re.S)
    assert row is not None
    text = re.sub(r"<[^>]+>|\s+", " ", row.group(0))
    assert "1 run " in text and "1 succeeded" in text and "1 evaluation" in text, text
