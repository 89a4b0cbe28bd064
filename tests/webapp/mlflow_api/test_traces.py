"""verl's rollout traces (verl.utils.rollout_trace with the mlflow backend, as verl 0.9 makes them) through
the official client into the live server: each trace one trajectory of the run, its generate spans
the steps, its tool spans their tool calls (docs/mlflow.md#traces)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from pydantic import BaseModel

from trainer.contract import API_ROOT
from webapp.experiments.artifacts import artifact_root
from webapp.experiments.models import Experiment, Run
from webapp.ingestion.models import ToolCall, Trajectory
from webapp.mlflow_api.traces import trajectory_of


# The shapes of verl's own models (TokenOutput, FunctionCall, ToolResponse, AgentLoopOutput), which
# the spans carry as their outputs.
class TokenOutput(BaseModel):
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = None


class FunctionCall(BaseModel):
    arguments: str
    name: str


class ToolResponse(BaseModel):
    text: str | None = None


class AgentLoopMetrics(BaseModel):
    generate_sequences: float = 0.0
    tool_calls: float = 0.0


class AgentLoopOutput(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    reward_score: float | None = None
    num_turns: int = 0
    metrics: AgentLoopMetrics


# The model's two turns: a tool call, then the answer. Token ids are characters here.
REPLIES = ['<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>', "The answer is 42."]
CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _ids(text: str) -> list[int]:
    return [ord(c) for c in text]


# verl 0.9's rollout tracing with the mlflow backend, making the client calls verl makes
# (docs/mlflow.md#traces): importing verl itself would cost seconds of torch, so
# test_these_are_the_calls_verl_makes holds this copy to verl's installed source.
PROJECT, EXPERIMENT_NAME = "verl-traces", "qwen3-grpo"
VERL_CALLS = {
    "utils/rollout_trace.py": (
        "mlflow.set_experiment(project_name)",
        "with mlflow.start_span(name=name) as span:",
        "mlflow.set_trace_tag(trace_id, str(key), str(value))",
        'attributes["experiment_name"] = RolloutTraceConfig.get_instance().experiment_name',
        "with mlflow.start_span(name=func.__qualname__) as span:",
        "span.set_inputs(inputs)",
        "span.set_outputs(result)",
    ),
    "experimental/agent_loop/agent_loop.py": ('sample_index=trajectory["sample_index"]', 'name="agent_loop"'),
}


def init_tracing() -> None:
    """RolloutTraceConfig.init(project, experiment_name, backend="mlflow")."""
    import mlflow

    mlflow.config.enable_async_logging()
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    mlflow.set_experiment(PROJECT)


def rollout_trace_op(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        import mlflow

        bound = inspect.signature(func).bind(self, *args, **kwargs)
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        del inputs["self"]
        with mlflow.start_span(name=func.__qualname__) as span:
            span.set_inputs(inputs)
            result = await func(self, *args, **kwargs)
            span.set_outputs(result)
        return result

    return traced


@contextlib.contextmanager
def rollout_trace_attr(
    sample_index: int, step: int, rollout_n: int, validate: bool, name: str
) -> Iterator[None]:
    import mlflow

    attributes = {"sample_index": sample_index, "step": step, "rollout_n": rollout_n, "validate": validate,
                  "experiment_name": EXPERIMENT_NAME}  # fmt: skip
    with mlflow.start_span(name=name) as span:
        for key, value in attributes.items():
            mlflow.set_trace_tag(span.trace_id, str(key), str(value))
        yield


# An agent loop shaped like verl's ToolAgentLoop; the model server's client is the one stand-in (it
# replays REPLIES).
class LLMServerClient:
    def __init__(self) -> None:
        self.turn = 0

    @rollout_trace_op
    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        reply = REPLIES[self.turn]
        self.turn += 1
        return TokenOutput(token_ids=_ids(reply), log_probs=[-0.5] * len(reply), stop_reason="stop")


class HermesToolParser:
    @rollout_trace_op
    async def extract_tool_calls(self, responses_ids: list[int]) -> tuple[str, list[FunctionCall]]:
        text = "".join(chr(i) for i in responses_ids)
        found = [json.loads(body) for body in CALL.findall(text)]
        calls = [FunctionCall(name=f["name"], arguments=json.dumps(f["arguments"])) for f in found]
        return CALL.sub("", text), calls


class MultiplyTool:
    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        return ToolResponse(text=str(parameters["a"] * parameters["b"])), 0.5, {}


class ToolAgentLoop:
    def __init__(self) -> None:
        self.llm, self.parser, self.tool = LLMServerClient(), HermesToolParser(), MultiplyTool()

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt = _ids(kwargs["raw_prompt"][-1]["content"])
        response: list[int] = []
        for _turn in range(len(REPLIES)):
            out = await self.llm.generate(
                uuid.uuid4().hex, prompt_ids=prompt + response, sampling_params=sampling_params
            )
            response += out.token_ids
            _text, calls = await self.parser.extract_tool_calls(out.token_ids)
            for call in calls:
                result, _reward, _metrics = await self.tool.execute("t1", json.loads(call.arguments))
                response += _ids(result.text or "")
            if not calls:
                break
        return AgentLoopOutput(prompt_ids=prompt, response_ids=response, response_mask=[1] * len(response),
                               reward_score=1.0, num_turns=4, metrics=AgentLoopMetrics(generate_sequences=0.25))  # fmt: skip


async def rollout(step: int, sample_index: int, rollout_n: int) -> None:
    """AgentLoopWorker._run_agent_loop."""
    with rollout_trace_attr(
        step=step, sample_index=sample_index, rollout_n=rollout_n, validate=False, name="agent_loop"
    ):
        await ToolAgentLoop().run({"temperature": 1.0}, raw_prompt=[{"role": "user", "content": "What is 6*7?"}],
                                  data_source="arith", reward_model={"ground_truth": "42"})  # fmt: skip


def test_these_are_the_calls_verl_makes() -> None:
    spec = importlib.util.find_spec("verl")  # finds the package without importing it
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    for name, calls in VERL_CALLS.items():
        source = (root / name).read_text(encoding="utf-8")
        assert [call for call in calls if call not in source] == [], name


def test_verls_rollout_traces_land_as_trajectories_of_the_run(
    tracking: Callable[[str], str], tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    from mlflow import MlflowClient

    tracking(tokens["bob"])
    # verl turns on the client's async logging process-wide; the environment is restored after.
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    mlflow.tracing.reset()
    try:
        init_tracing()
        experiment_id = mlflow.get_experiment_by_name(PROJECT).experiment_id
        # verl's tracking logger names its run after experiment_name; a rollout worker traces
        # outside it (no active run in that process) ...
        made = MlflowClient().create_run(experiment_id, run_name=EXPERIMENT_NAME)
        asyncio.run(rollout(3, 5, 0))
        # ... and a process where the run is active traces inside it.
        with mlflow.start_run(run_id=made.info.run_id):
            asyncio.run(rollout(3, 5, 1))
            mlflow.flush_trace_async_logging()
    finally:
        mlflow.tracing.reset()

    run = Run.objects.get(mlflow_run_id=made.info.run_id)
    stored = list(Trajectory.objects.filter(run=run).order_by("rollout_index"))
    assert [
        (t.training_step, t.sample_index, t.rollout_index, t.num_steps, t.num_tool_calls) for t in stored
    ] == [
        (3, 5, 0, 2, 1),
        (3, 5, 1, 2, 1),
    ]
    assert stored[0].group_id == stored[1].group_id and stored[0].total_reward == 1.0
    assert stored[0].uid.startswith("tr-") and stored[0].data_source == "arith"
    call = ToolCall.objects.get(trajectory=stored[0])
    assert (call.name, call.arguments, call.reward, call.step_index) == ("multiply", {"a": 6, "b": 7}, 0.5, 0)

    # Read back as the rollout viewer's API gives it, and the raw spans beside the run's artifacts.
    api = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['bob']}")
    response = api.get(f"{API_ROOT}/t/acme/runs/{run.pk}/trajectories/{stored[0].uid}")
    assert response.status_code == 200, response.content
    steps = response.json()["steps"]
    assert steps[0]["prompt_text"] == "user: What is 6*7?" and steps[1]["response_text"] == REPLIES[1]
    assert steps[0]["tool_calls"][0]["result"] == "42" and steps[1]["done"]
    # Without verl's token2text the response is the tool parser's text, its calls written back.
    assert (
        steps[0]["response_text"]
        == '<tool_call>{"name": "multiply", "arguments": {"a": 6, "b": 7}}</tool_call>'
    )
    spans = json.loads((artifact_root(run) / "traces" / stored[0].uid / "traces.json").read_text())["spans"]
    names = [s["name"].rsplit(".", 2)[-2:] for s in spans]  # verl names a span by the method's qualname
    assert (
        ["agent_loop"] in names and ["ToolAgentLoop", "run"] in names and ["MultiplyTool", "execute"] in names
    )

    # And through MLflow's own calls: the trace info, its spans, and the trajectory's page.
    trace = MlflowClient().get_trace(stored[0].uid)
    page = f"/t/acme/runs/{run.pk}/rollouts/{stored[0].pk}/"
    assert trace.info.tags["agent_r1.trajectory"] == page and Client().get(page).status_code == 302
    assert sorted(span.name for span in trace.data.spans) == sorted(s["name"] for s in spans)
    found = MlflowClient().search_traces(locations=[experiment_id], run_id=made.info.run_id)
    assert [t.info.trace_id for t in found] == [
        t.uid for t in sorted(stored, key=lambda t: -t.pk)
    ]  # newest first
    assert all(t.data.spans for t in found)
    with pytest.raises(mlflow.exceptions.MlflowException, match="not found"):
        MlflowClient().get_trace("tr-" + "0" * 32)


def test_a_trace_with_no_run_or_unreadable_spans_is_refused_and_stores_nothing(
    personas: dict[str, Any], tokens: dict[str, str]
) -> None:
    experiment = Experiment.create_external(personas["acme"], "loose traces", personas["bob"])[0]
    run = Run.create_external(experiment, "a run", None)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens['bob']}")
    trace_id = "tr-" + "a" * 32

    def start(metadata: dict[str, str], tags: dict[str, str]) -> Any:
        info = {"trace_id": trace_id, "trace_metadata": metadata, "tags": tags,
                "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": str(experiment.pk)}}}  # fmt: skip
        body = json.dumps({"trace": {"trace_info": info}})
        return client.post("/mlflow/api/3.0/mlflow/traces", body, content_type="application/json")

    for tags in ({}, {"experiment_name": "no such run"}):
        refused = start({}, tags)
        assert (refused.status_code, refused.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    started = start({}, {"experiment_name": "a run", "step": "2"})
    location = started.json()["trace"]["trace_info"]["tags"]["mlflow.artifactLocation"]
    assert location == f"mlflow-artifacts:/{experiment.pk}/{run.mlflow_run_id}/artifacts/traces/{trace_id}"

    url = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{experiment.pk}/{run.mlflow_run_id}/artifacts/traces/{trace_id}/traces.json"
    for body in (b"{not json", b'{"spans": 3}', b"[]"):
        response = client.put(url, body, content_type="application/json")
        assert (response.status_code, response.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), body
    assert not (artifact_root(run) / "traces" / trace_id / "traces.json").exists()
    assert not Trajectory.objects.filter(run=run).exists()

    spans = json.dumps({"spans": [{"name": "root"}, {"name": "call", "parent_span_id": "r"}]}).encode()
    assert client.put(url, spans, content_type="application/json").status_code == 200
    client.put(url, spans, content_type="application/json")  # the client's retry
    assert list(Trajectory.objects.filter(run=run).values_list("uid", "training_step")) == [(trace_id, 2)]
    unsupported = client.post(
        "/mlflow/api/3.0/mlflow/traces/tr-1/assessments", "{}", content_type="application/json"
    )
    assert (unsupported.status_code, unsupported.json()["error_code"]) == (404, "ENDPOINT_NOT_FOUND")


def test_a_trace_that_is_not_verls_gets_one_step_per_span() -> None:
    spans = [
        {"name": "chain", "span_id": "r", "parent_span_id": None, "start_time_unix_nano": 1, "attributes": {}},
        {"name": "retrieve", "span_id": "a", "parent_span_id": "r", "start_time_unix_nano": 2,
         "end_time_unix_nano": 2_000_000_002, "attributes": {"mlflow.spanInputs": '"query"', "mlflow.spanOutputs": '["doc"]'},
         "status": {"code": "STATUS_CODE_ERROR"}},
        "not a span",
    ]  # fmt: skip
    wire = trajectory_of("tr-" + "b" * 32, {"step": "x", "sample_index": "-1"}, spans)
    assert (wire.sample_index, len(wire.steps)) == (0, 1)
    step = wire.steps[0]
    assert (step.prompt_text, step.response_text, step.timings, step.done) == (
        "query",
        '["doc"]',
        {"span_s": 2.0},
        True,
    )
    assert step.info["failed"] is True
