"""In a real browser, with a real Celery worker: two checkpoints of a run answer one prompt side by
side in the playground, reached from the run page's checkpoint row; then one checkpoint is exported
and its zip downloaded. Screenshots at 1440 and 1024 px go to var/shots/playground/ (looked at by hand)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.playground.conftest import GSM8K_QUESTION
from webapp.experiments.jobs import Job, JobStatus
from webapp.experiments.models import Run
from webapp.playground.models import AnswerStatus, PlaygroundAnswer, PlaygroundSession

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOTS = Path(__file__).resolve().parents[3] / "var" / "shots" / "playground"
WIDTHS = (1440, 1024)


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_two_checkpoints_answer_side_by_side_and_one_is_exported(
    trained_run: Run,
    signed_in: Any,
    live_server: Any,
    start_worker: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.PLAYGROUND_MAX_TOKENS = 12  # random tiny models: a few tokens each show the page
    settings.EXPORT_DIR = tmp_path / "exports"
    monkeypatch.setenv("STUDIO_EXPORT_DIR", str(settings.EXPORT_DIR))  # the worker's setting too
    start_worker()
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{trained_run.pk}/")
    page.locator("#checkpoints a.playground").first.click()  # step 1's row
    page.wait_for_selector("#playground-form")
    assert page.locator("#id_model_a").input_value() == f"{trained_run.pk}:1"
    page.select_option("#id_model_b", f"{trained_run.pk}:2")
    page.fill("#id_prompt", GSM8K_QUESTION)
    page.fill("#id_ground_truth", "42")
    assert page.locator("input[name=tools][value=calculator]").is_checked()
    shoot(page, "form")
    page.click("#playground-form button[type=submit]")
    page.wait_for_selector("#answers[data-status=done]", timeout=120_000)
    for position in (0, 1):
        answer = page.locator(f"#answer-{position}")
        assert answer.get_attribute("data-status") == "done", answer.inner_text()
        assert answer.locator("li.step").count() >= 1
        assert answer.locator(".reward").inner_text() in ("0.000", "1.000")
    labels = page.locator("#answers h2").all_inner_texts()
    assert labels == [f"run {trained_run.pk} · step 1", f"run {trained_run.pk} · step 2"]
    shoot(page, "side-by-side")

    page.goto(f"{live_server.url}/t/acme/runs/{trained_run.pk}/")
    page.locator("#checkpoints form.export button").last.click()  # step 2
    page.wait_for_selector("#export-done", timeout=60_000)
    shoot(page, "export")
    with page.expect_download() as download:
        page.click("text=Download (zip)")
    saved = tmp_path / "export.zip"
    download.value.save_as(saved)
    names = {Path(name).name for name in zipfile.ZipFile(saved).namelist()}
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "generation_config.json",
        "README.md",
    } <= names


def test_a_session_shows_each_tool_call_with_its_result_and_the_limit_that_stopped_it(
    trained_run: Run, signed_in: Any, live_server: Any
) -> None:
    """The steps a model that calls the calculator leaves (SmolLM2-135M untrained does not call it)."""
    job = Job.objects.create(kind="playground", task="t", team=trained_run.team, status=JobStatus.DONE)
    session = PlaygroundSession.objects.create(
        team=trained_run.team, experiment=trained_run.experiment, job=job, prompt=GSM8K_QUESTION,
        row={"reward_model": {"ground_truth": "42"}}, tools=["calculator"],
        budget={"max_steps": 3, "max_total_tokens": 64, "max_new_tokens": 32, "time_s": 120},
    )  # fmt: skip
    call = {"name": "calculator", "arguments": {"expression": "12 + 30"}, "result": "42", "error": None}
    steps = [
        {
            "index": 0,
            "response": f"<tool_call>{call}</tool_call>",
            "tokens": 20,
            "tool_calls": [call],
            "reward": None,
        },
        {"index": 1, "response": "12 + 30 = 42\n#### 42", "tokens": 12, "tool_calls": [], "reward": 1.0},
    ]
    PlaygroundAnswer.objects.create(session=session, position=0, run=trained_run, step=2, label="run · step 2",
                                    status=AnswerStatus.DONE, steps=steps, stop_reason="done", reward=1.0)  # fmt: skip
    PlaygroundAnswer.objects.create(session=session, position=1, label="base model", status=AnswerStatus.DONE,
                                    steps=steps[:1] * 3, stop_reason="max_steps", reward=0.0)  # fmt: skip
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/playground/{session.pk}/")
    assert page.locator("#answer-0 .tool-result").inner_text() == "42"
    assert page.locator("#answer-1 .stop-reason").inner_text() == "stopped at its step limit (3 steps)"
    shoot(page, "tool-calls")
