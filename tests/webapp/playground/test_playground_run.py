"""A real playground session (docs/playground.md): SmolLM2-135M-Instruct, the experiment's base
model, and a checkpoint of a run answer a GSM8K-like prompt with the calculator offered; the task's
body runs here (the browser test runs it on a real Celery worker)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.webapp.playground.conftest import GSM8K_QUESTION
from webapp.experiments.jobs import JobStatus
from webapp.experiments.models import Run
from webapp.playground import services
from webapp.playground.models import AnswerStatus
from webapp.playground.tasks import playground_task

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_smollm2_and_a_checkpoint_answer_a_gsm8k_prompt_side_by_side(
    personas: dict[str, Any], trained_run: Run, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PLAYGROUND_MAX_TOKENS = 24  # CPU is scarce: a few words of each model are enough here
    # The test runner allows database calls from async code; a Celery worker does not.
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE", raising=False)
    ask = services.Ask(choices=["base", f"{trained_run.pk}:2"], prompt=GSM8K_QUESTION, ground_truth="42")
    session = services.start(trained_run.experiment, personas["alice"], ask)
    playground_task(session.job.pk)
    session.refresh_from_db()
    assert session.job.status == JobStatus.DONE
    base, checkpoint = session.answers.all()
    for answer in (base, checkpoint):
        assert answer.status == AnswerStatus.DONE, answer.message
        assert answer.steps and answer.steps[0]["response"]
        assert answer.stop_reason in ("done", "response_budget", "max_steps")
        assert answer.reward in (0.0, 1.0)  # scored by gsm8k's reward against the ground truth
        assert 0 < answer.response_tokens <= 24
    assert base.steps != checkpoint.steps  # two different models answered


def test_a_spent_time_budget_stops_the_answer_and_says_so(
    personas: dict[str, Any], trained_run: Run, settings: Any
) -> None:
    settings.PLAYGROUND_TIME_S = 0
    session = services.start(
        trained_run.experiment,
        personas["alice"],
        services.Ask(choices=[f"{trained_run.pk}:1"], prompt="2 + 2?"),
    )
    playground_task(session.job.pk)
    (answer,) = session.answers.all()
    assert (answer.status, answer.stop_reason, answer.steps) == (AnswerStatus.DONE, "time_budget", [])
