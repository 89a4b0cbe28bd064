"""MLflow traces as trajectories: what verl's rollout-trace backend
(``actor_rollout_ref.rollout.trace.backend=mlflow``) logs lands in the run's rollout viewer
(docs/mlflow.md#traces).

The official client (3.x) exports a trace once its root span has ended, in two calls:

1. ``POST …/api/3.0/mlflow/traces`` with ``{"trace": {"trace_info": …}}``: the trace's id,
   experiment, times, state, metadata and tags (verl's ``step``, ``sample_index``, ``rollout_n``,
   ``validate``, ``experiment_name``). :func:`start_trace` finds the run it belongs to, keeps the
   trace info beside the run's artifacts (``traces/<trace id>/trace_info.json``) and answers with
   the tag ``mlflow.artifactLocation`` naming that folder.
2. ``PUT <that folder>/traces.json`` through the artifact service: the spans. The artifact upload
   hands them to :func:`prepare` before the file is kept, and the trace becomes one trajectory of
   the run (:func:`webapp.ingestion.trajectories.store_batch`, as a launched run's rollouts are stored);
   the file stays, so the raw spans can be downloaded.

Before that the client asks ``GET /version`` whether it may also send spans one by one (OTLP, MLflow
3.4 and later); that answers ENDPOINT_NOT_FOUND, and the client then sends whole traces only.

Span → trajectory (pure: :func:`trajectory_of`): each ``*.generate`` span (verl's LLM server client)
is a step, in start order; the ``*.execute`` spans (verl's tools) between it and the next generate
are its tool calls, named by the calls verl's tool parser (``*.extract_tool_calls``) found; the
agent loop's ``*.run`` span gives the prompt messages, the data source, ground truth, reward and
metrics. A trace without generate spans (not verl's) gets one step per span below its root.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from trainer.contract import ID_MAX, INT4_MAX, StepWire, ToolCallWire, TrajectoryBatch, TrajectoryWire
from webapp.experiments.artifacts import FOLDER, UPLOADING, artifact_root
from webapp.experiments.models import Run
from webapp.ingestion import trajectories as rollouts
from webapp.mlflow_api.access import Caller, get_experiment_for_caller, get_run_for_caller
from webapp.mlflow_api.errors import invalid

Body = dict[str, Any]

TRACES = "traces"  # the folder of a run's artifacts that holds its traces
TRACE_INFO_FILE = "trace_info.json"
SPANS_FILE = "traces.json"  # the name the client uploads a trace's spans under
ARTIFACT_LOCATION_TAG = "mlflow.artifactLocation"
SPANS_LOCATION_TAG = "mlflow.trace.spansLocation"
SOURCE_RUN_KEY = "mlflow.sourceRun"  # trace metadata: the run active when the trace started
# MLflow 3's trace ids: "tr-" and the OpenTelemetry trace id in hex.
_TRACE_ID = re.compile(r"^tr-[0-9a-f]{32}$")
MAX_MAP_ENTRIES = 1000
MAX_MAP_VALUE = 8000  # MLflow's server cuts trace tag values there too
MAX_SPANS = 10_000
MAX_SPANS_BYTES = 64 * 2**20  # read whole into memory: a verl trace is a few hundred KB
INPUTS, OUTPUTS = "mlflow.spanInputs", "mlflow.spanOutputs"


# -- the REST call ----------------------------------------------------------------------------------


def start_trace(caller: Caller, body: Body, raw: bytes) -> Body:
    """StartTraceV3: keep the trace info with the run it belongs to; answer where its spans go."""
    info = _object(_object(body, "trace", "trace"), "trace_info", "trace.trace_info")
    trace_id = trace_id_of(info.get("trace_id"))
    location = _object(info, "trace_location", "trace.trace_info.trace_location")
    where = _object(location, "mlflow_experiment", "trace.trace_info.trace_location.mlflow_experiment")
    experiment = get_experiment_for_caller(caller, where.get("experiment_id"))
    metadata = _string_map(info.get("trace_metadata"), "trace_metadata")
    tags = _string_map(info.get("tags"), "tags")
    run = run_of_trace(caller, experiment.pk, metadata, tags)
    tags.pop(SPANS_LOCATION_TAG, None)  # set by a server that stores spans itself; ours go to artifacts
    tags[ARTIFACT_LOCATION_TAG] = (
        f"mlflow-artifacts:/{run.experiment_id}/{run.mlflow_run_id}/{FOLDER}/{TRACES}/{trace_id}"
    )
    answer: Body = {
        "trace_id": trace_id,
        "trace_location": {
            "type": "MLFLOW_EXPERIMENT",
            "mlflow_experiment": {"experiment_id": str(experiment.pk)},
        },
        "trace_metadata": metadata,
        "tags": tags,
    }
    for name in ("client_request_id", "request_time", "execution_duration", "state"):
        value = info.get(name)
        if isinstance(value, str) and len(value) <= 100:
            answer[name] = value
    folder = artifact_root(run) / TRACES / trace_id
    _write(folder / TRACE_INFO_FILE, json.dumps(answer, ensure_ascii=False).encode())
    return {"trace": {"trace_info": answer}}


def run_of_trace(caller: Caller, experiment_pk: int, metadata: dict[str, str], tags: dict[str, str]) -> Run:
    """The run a trace lands in: the run active when it started (``mlflow.sourceRun``); else the
    caller's run (a run's token); else the latest run of the trace's experiment named as verl's
    ``experiment_name`` tag (verl's tracking logger names its MLflow run so; its rollout workers
    trace outside that run)."""
    if SOURCE_RUN_KEY in metadata:
        return get_run_for_caller(caller, metadata[SOURCE_RUN_KEY], write=True)
    if caller.run is not None:
        return caller.run
    name = tags.get("experiment_name", "")
    found = (
        caller.runs().filter(experiment_id=experiment_pk, name=name).order_by("-pk").first() if name else None
    )
    if found is None:
        raise invalid(
            "A trace must belong to a run: start it under mlflow.start_run(), or tag it experiment_name=<the "
            "name of a run of its experiment> (verl does)."
            + (f" No run named {name!r} in experiment {experiment_pk}." if name else "")
        )
    return get_run_for_caller(caller, found.mlflow_run_id, write=True)


# -- the spans, through the artifact service -------------------------------------------------------


def prepare(run: Run, inside: PurePosixPath, uploaded: Path) -> TrajectoryBatch | None:
    """For an upload of a started trace's spans, the trajectory they make (INVALID_PARAMETER_VALUE
    when they cannot be read, before anything is kept); None for any other artifact."""
    parts = inside.parts
    if len(parts) != 3 or parts[0] != TRACES or parts[2] != SPANS_FILE:
        return None
    info_file = artifact_root(run) / TRACES / parts[1] / TRACE_INFO_FILE
    if not info_file.is_file():
        return None  # a file of that name logged by hand: an artifact like any other
    if uploaded.stat().st_size > MAX_SPANS_BYTES:
        raise invalid(f"The spans of one trace are limited to {MAX_SPANS_BYTES} bytes.")
    try:
        info = json.loads(info_file.read_bytes())
        data = json.loads(uploaded.read_bytes())
    except (ValueError, RecursionError):
        raise invalid(f"The spans of trace {parts[1]} are not valid JSON.") from None
    tags = _dict(_dict(info).get("tags"))
    if not isinstance(data, dict) or not isinstance(data.get("spans"), list):
        raise invalid(f"The spans of trace {parts[1]} must be a JSON object with a list of spans.")
    if len(data["spans"]) > MAX_SPANS:
        raise invalid(f"A trace may have at most {MAX_SPANS} spans.")
    try:
        wire = trajectory_of(parts[1], tags, data["spans"])
    except ValidationError as error:
        raise invalid(
            f"The spans of trace {parts[1]} make no trajectory: {error.errors()[0]['msg']}"
        ) from None
    return TrajectoryBatch(training_step=_count(tags.get("step")), trajectories=[wire])


def land(run: Run, batch: TrajectoryBatch) -> None:
    """Store the trace's trajectory; the same trace sent again is stored once."""
    rollouts.store_batch(run, batch, f"mlflow-{batch.trajectories[0].id}")


# -- spans → a trajectory (pure) -------------------------------------------------------------------


def trajectory_of(trace_id: str, tags: Mapping[str, Any], spans: list[Any]) -> TrajectoryWire:
    found = sorted((_span(s) for s in spans if isinstance(s, dict)), key=lambda s: s["start"])
    root = next((s for s in found if not s["parent"]), found[0] if found else None)
    agent = next((s for s in found if s["name"].endswith(".run")), None)
    agent_in = _dict(agent["inputs"]) if agent else {}
    agent_out = _dict(agent["outputs"]) if agent else {}
    kwargs = _dict(agent_in.get("kwargs"))
    generates = [s for s in found if s["name"].endswith(".generate")]
    steps = (
        _verl_steps(found, generates, _messages_text(kwargs.get("raw_prompt")))
        if generates
        else [_generic_step(i, s) for i, s in enumerate(s for s in found if s is not root)]
    )
    validate = str(tags.get("validate", "")).lower() == "true"
    sample, step = _count(tags.get("sample_index")), _count(tags.get("step"))
    reward = agent_out.get("reward_score")
    steps[-1:] = [s.model_copy(update={"done": True}) for s in steps[-1:]]
    return TrajectoryWire(
        id=trace_id,
        group_id=f"{'val-' if validate else ''}{step}-{sample}",
        sample_index=sample,
        rollout_index=_count(tags.get("rollout_n")),
        data_source=str(kwargs.get("data_source") or "")[:100],
        ground_truth=_dict(kwargs.get("reward_model")).get("ground_truth"),
        total_reward=_float(reward) or 0.0,
        metrics={k: f for k, v in _dict(agent_out.get("metrics")).items() if (f := _float(v)) is not None},
        info={
            "source": "mlflow trace",
            "trace_id": trace_id,
            "tags": {str(k): str(v)[:500] for k, v in tags.items() if not str(k).startswith("mlflow.")},
            "spans": f"{FOLDER}/{TRACES}/{trace_id}/{SPANS_FILE}",
            "num_turns": _float(agent_out.get("num_turns")),
            "root": root["name"] if root else "",
        },
        steps=steps,
    )


def _verl_steps(
    spans: list[dict[str, Any]], generates: list[dict[str, Any]], first_prompt: str
) -> list[StepWire]:
    steps = []
    for index, generate in enumerate(generates):
        after = generates[index + 1]["start"] if index + 1 < len(generates) else float("inf")
        later = [s for s in spans if generate["start"] < s["start"] < after]
        parser = next((s for s in later if s["name"].endswith(".extract_tool_calls")), None)
        parsed = _list(parser["outputs"]) if parser else []
        named = [_dict(c) for c in _list(parsed[1])] if len(parsed) > 1 else []
        executes = [s for s in later if s["name"].endswith(".execute")]
        inputs, outputs = _dict(generate["inputs"]), _dict(generate["outputs"])
        response = outputs.get("response_text")
        if not isinstance(response, str):
            response = _with_calls(parsed[0] if parsed and isinstance(parsed[0], str) else "", named)
        prompt = outputs.get("prompt_text")
        steps.append(
            StepWire(
                index=index,
                prompt_text=prompt if isinstance(prompt, str) else first_prompt if index == 0 else "",
                response_text=response,
                num_prompt_tokens=len(_list(inputs.get("prompt_ids"))),
                num_response_tokens=len(_list(outputs.get("token_ids"))),
                info={"span": generate["name"], "span_id": generate["id"]},
                timings={"generate_s": generate["seconds"]},
                tool_calls=[
                    _tool_call(s, named[i] if i < len(named) else {}) for i, s in enumerate(executes)
                ],
            )
        )
    return steps


def _with_calls(text: str, calls: list[dict[str, Any]]) -> str:
    """The tool parser's text with the calls it took out of it written back, as ``<tool_call>`` JSON."""
    written = [
        "<tool_call>"
        + json.dumps(
            {"name": call.get("name"), "arguments": _decoded(call.get("arguments"))}, ensure_ascii=False
        )
        + "</tool_call>"
        for call in calls
    ]
    return "\n".join(part for part in [text, *written] if part)


def _tool_call(span: dict[str, Any], called: dict[str, Any]) -> ToolCallWire:
    """verl's BaseTool.execute(instance_id, parameters, **kwargs) → (ToolResponse, reward, metrics)."""
    inputs, outputs = _dict(span["inputs"]), _list(span["outputs"])
    result = _dict(outputs[0]).get("text") if outputs else None
    reward = outputs[1] if len(outputs) > 1 else None
    return ToolCallWire(
        name=str(called.get("name") or span["name"].removesuffix(".execute"))[:ID_MAX],
        arguments=inputs.get("parameters", called.get("arguments")),
        result=result if isinstance(result, str) else _text(span["outputs"]),
        error="error" if span["failed"] else None,
        reward=_float(reward),
        latency_s=span["seconds"],
        info={"span": span["name"], "span_id": span["id"]},
    )


def _generic_step(index: int, span: dict[str, Any]) -> StepWire:
    return StepWire(
        index=index,
        prompt_text=_text(span["inputs"]),
        response_text=_text(span["outputs"]),
        info={"span": span["name"], "span_id": span["id"], "failed": span["failed"]},
        timings={"span_s": span["seconds"]},
    )


def _span(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields of one span of MLflow's trace data (Span.to_dict) this module reads; attribute
    values are JSON text."""
    attributes = _dict(raw.get("attributes"))
    start, end = _float(raw.get("start_time_unix_nano")) or 0.0, _float(raw.get("end_time_unix_nano"))
    seconds = (end - start) / 1e9 if end is not None and end >= start else 0.0
    return {
        "name": str(raw.get("name") or ""),
        "id": str(raw.get("span_id") or "")[:100],
        "parent": raw.get("parent_span_id"),
        "start": start,
        "seconds": min(seconds, 1e9),
        "inputs": _decoded(attributes.get(INPUTS)),
        "outputs": _decoded(attributes.get(OUTPUTS)),
        "failed": _dict(raw.get("status")).get("code") == "STATUS_CODE_ERROR",
    }


def _messages_text(messages: Any) -> str:
    """Chat messages as the prompt's text, one ``role: content`` line each."""
    lines = [f"{_dict(m).get('role', '')}: {_dict(m).get('content', '')}" for m in _list(messages)]
    return "\n".join(lines)


# -- small readers ---------------------------------------------------------------------------------


def trace_id_of(value: Any) -> str:
    if not isinstance(value, str) or not _TRACE_ID.match(value):
        raise invalid(
            f"Invalid value {json.dumps(value, default=str)[:100]} for parameter 'trace.trace_info.trace_id' "
            "supplied: a trace id is 'tr-' and 32 hexadecimal digits."
        )
    return value


def _object(body: Mapping[str, Any], name: str, path: str) -> dict[str, Any]:
    value = body.get(name)
    if not isinstance(value, dict):
        raise invalid(f"Missing value for required parameter '{path}'.")
    return value


def _string_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_MAP_ENTRIES:
        raise invalid(f"'{name}' must be an object of at most {MAX_MAP_ENTRIES} string values.")
    checked = {}
    for key, item in value.items():
        if not isinstance(item, str) or "\x00" in key or "\x00" in item or len(key) > 250:
            raise invalid(
                f"'{name}.{key[:100]}' must be a string without NUL, its key at most 250 characters."
            )
        checked[key] = item[:MAX_MAP_VALUE]
    return checked


def _decoded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _float(value: Any) -> float | None:
    """A JSON number as a float (finite, not a bool), else None."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value
        and abs(value) < 1e300
    ):
        return float(value)
    return None


def _count(value: Any) -> int:
    """A tag holding a step or an index (verl writes str(int)); 0 when it holds none."""
    try:
        number = int(str(value))
    except ValueError:
        return 0
    return number if 0 <= number <= INT4_MAX else 0


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=UPLOADING)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(temporary, target)
