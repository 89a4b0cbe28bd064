"""Runs trained elsewhere: an Agent-R1 trajectory dump and a verl rollout dump, written here in their
exact formats (verl's by verl's own writer), imported through the REST API into an external run
whose rollout pages work like a launched run's (docs/imports.md). The request answers at once with a
job that a worker does (here: Celery eager, in this process, when the request's work commits; with a
real worker in test_import_jobs.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from webapp.accounts.models import ApiToken
from webapp.celery import app
from webapp.experiments.jobs import Job, JobStatus
from webapp.experiments.models import Run, RunStatus
from webapp.ingestion.models import MetricPoint, ToolCall, Trajectory, TrajectoryStep

PROMPTS = ("What is 2+3?", "What is 7*6?")


@pytest.fixture
def alice_token(personas: Any) -> str:
    return ApiToken.issue(personas["alice"], "tests")[1]


@pytest.fixture(autouse=True)
def eager(django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each import's job runs in this process once its request is answered (webapp.celery's eager
    mode; the request's on-commit callbacks are run after it, as a commit would)."""
    app.conf.task_always_eager = True
    answer = Client.request

    def request_then_commit(self: Client, **request: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return answer(self, **request)

    monkeypatch.setattr(Client, "request", request_then_commit)
    yield
    app.conf.task_always_eager = False


def agent_r1_line(step: int, prompt: str, rollout: int, answer: str) -> dict[str, Any]:
    """One line as Agent-R1's trainer dumps a trajectory: two LLM calls, the first calling a tool."""
    call = f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{prompt[8:-1]}"}}}}</tool_call>'
    first_input = f"<|user|>{prompt}<|assistant|>"
    second_input = first_input + call + f"<|user|><tool_response>\n{answer}\n</tool_response><|assistant|>"
    steps = [
        {"step_index": 0, "input": first_input, "output": call, "score": 0.0},
        {"step_index": 1, "input": second_input, "output": f"The answer is {answer}.", "score": 1.0},
    ]
    return {
        "trajectory_uid": f"traj-{step}-{prompt[8:11]}-{rollout}",
        "input": first_input,
        "output": steps[-1]["output"],
        "gts": answer,
        "score": 1.0 if rollout == 0 else 0.0,
        "step": step,
        "num_steps": len(steps),
        "steps": steps,
    }


def post_import(client: Client, token: str, files: list[Path], **fields: str) -> Any:
    """The import's request; its answer (the job, 202, or a refusal)."""
    handles = [path.open("rb") for path in files]
    try:
        data: dict[str, Any] = {"dump": [h for h, p in zip(handles, files, strict=True) if p.stem.isdigit()]}
        metrics = [h for h, p in zip(handles, files, strict=True) if not p.stem.isdigit()]
        if metrics:
            data["metrics"] = metrics[0]
        return client.post("/api/t/acme/imports", {**data, **fields}, HTTP_AUTHORIZATION=f"Bearer {token}")
    finally:
        for handle in handles:
            handle.close()


def imported(client: Client, token: str, files: list[Path], **fields: str) -> dict[str, Any]:
    """The import's job once done, as its poll answers it."""
    response = post_import(client, token, files, **fields)
    assert response.status_code == 202, response.content
    job: dict[str, Any] = client.get(
        f"/api/t/acme/imports/{response.json()['id']}", HTTP_AUTHORIZATION=f"Bearer {token}"
    ).json()
    assert job["status"] == "done", job
    return job


def test_an_agent_r1_dump_becomes_an_external_run_with_groups_tools_and_metrics(
    client: Client, personas: Any, alice_token: str, tmp_path: Path
) -> None:
    dumps = []
    for step in (1, 2):
        path = tmp_path / f"{step}.jsonl"
        lines = [agent_r1_line(step, p, r, str(eval(p[8:-1]))) for p in PROMPTS for r in range(2)]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        dumps.append(path)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "".join(
            json.dumps({"step": s, "data": {"critic/score/mean": s / 2, "note": "x"}}) + "\n" for s in (1, 2)
        )
    )
    job = imported(client, alice_token, [*dumps, metrics], experiment="agent-r1 math", name="from A")
    body = job["result"]
    assert (body["format"], body["trajectories"], body["steps"], body["points"]) == ("agent-r1", 8, 2, 2)
    run = Run.objects.get(pk=job["run"]["id"])
    assert run.is_external and run.status == RunStatus.SUCCEEDED and run.name == "from A"
    assert run.experiment.name == "agent-r1 math" and run.experiment.external
    trajectories = Trajectory.objects.filter(run=run)
    assert sorted(trajectories.values_list("training_step", flat=True)) == [1] * 4 + [2] * 4
    # The two rollouts of a prompt form its group (same prompt text); the uid is Agent-R1's.
    first = trajectories.get(uid="traj-1-2+3-0")
    group = trajectories.filter(training_step=1, group_id=first.group_id)
    assert sorted(group.values_list("rollout_index", flat=True)) == [0, 1]
    assert first.total_reward == 1.0 and first.num_steps == 2
    steps = TrajectoryStep.objects.filter(trajectory=first).order_by("index")
    assert [s.reward for s in steps] == [0.0, 1.0]
    call = ToolCall.objects.select_related("result").get(trajectory=first)
    assert (call.name, call.arguments, call.result.text, call.step_index) == (
        "calculator", {"expression": "2+3"}, "5", 0,
    )  # fmt: skip
    assert MetricPoint.objects.filter(run=run, key__name="critic/score/mean").count() == 2
    # The pages of a launched run read it the same way.
    client.force_login(personas["alice"])
    pages = {
        "rollout_group": {"run_id": run.pk, "group_id": first.group_id},
        "run_tools": {"run_id": run.pk},
        "run_prompts": {"run_id": run.pk},
        "rollouts": {"run_id": run.pk},
    }
    for name, kwargs in pages.items():
        page = client.get(reverse(name, kwargs={"team_slug": "acme", **kwargs}))
        assert page.status_code == 200, name
    assert "calculator" in client.get(reverse("run_tools", args=["acme", run.pk])).content.decode()


def test_a_verl_rollout_dump_written_by_verl_imports_with_its_extra_reward_keys(
    client: Client, alice_token: str, tmp_path: Path
) -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    folder = tmp_path / "rollout_data"
    for step in (3, 4):
        RayPPOTrainer._write_generations(
            inputs=[PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[1]],
            outputs=["5", "6", "42", "41"],
            gts=["5", "5", "42", "42"],
            scores=[1.0, 0.0, 1.0, 0.0],
            reward_extra_infos_dict={"acc": [1.0, 0.0, 1.0, 0.0], "too_short": [1.0]},
            dump_path=str(folder),
            global_steps=step,
        )
    job = imported(client, alice_token, sorted(folder.glob("*.jsonl")))
    run = Run.objects.get(pk=job["run"]["id"])
    assert job["result"]["format"] == "verl" and run.experiment.name == "imports"
    trajectories = Trajectory.objects.filter(run=run, training_step=3).order_by(
        "sample_index", "rollout_index"
    )
    assert [(t.sample_index, t.rollout_index, t.success) for t in trajectories] == [
        (0, 0, True), (0, 1, False), (1, 0, True), (1, 1, False),
    ]  # fmt: skip
    assert trajectories[0].metrics == {"acc": 1.0}
    step = TrajectoryStep.objects.get(trajectory=trajectories[1])
    assert (step.reward, step.done) == (0.0, True)
    # No metrics file: the reward curve comes from the trajectories' rewards.
    means = MetricPoint.objects.filter(run=run, key__name="reward/mean").order_by("step")
    assert [(p.step, p.value) for p in means] == [(3, 0.5), (4, 0.5)]


def test_a_bad_line_fails_the_job_with_its_file_and_line_and_stores_nothing(
    client: Client, alice_token: str, tmp_path: Path
) -> None:
    dump = tmp_path / "5.jsonl"
    dump.write_text(json.dumps({"input": "a", "output": "b", "score": 1.0}) + "\n{not json\n")
    response = post_import(client, alice_token, [dump])
    assert response.status_code == 202
    job = Job.objects.get(pk=response.json()["id"])
    assert job.status == JobStatus.FAILED and job.message.startswith("5.jsonl line 2: not JSON")
    assert not Run.objects.exists() and not job.folder.exists()
