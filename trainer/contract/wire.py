"""The wire models: the pydantic bodies the trainer sends and the web app validates.

Every batch the trainer POSTs carries a ``batch_id`` (also sent as the ``Idempotency-Key`` header): a
replayed batch has the same id, so the server can answer 2xx without storing it twice. Only the
process that claimed the run may change it: the claim records the launch's claimant id
(``CLAIMANT_ENV``), and every status, heartbeat and ingestion call carries it in ``CLAIMANT_HEADER``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from trainer.contract.env import CLAIMANT_ENV
from trainer.contract.limits import (
    DATA_SOURCE_MAX,
    ID_MAX,
    INT4_MAX,
    METRIC_KEY_MAX,
    TOOL_ERROR_MAX,
    BatchId,
    Count,
    Identifier,
    JsonField,
    JsonFloat,
    JsonFloats,
    JsonObject,
    Text,
    cut_to,
    no_nul,
)
from trainer.contract.paths import CLAIMANT_HEADER
from trainer.contract.token_signals import (
    TOKEN_SIGNALS_MAX_TOKENS,
    TOKEN_TEXT_MAX,
    TokenSignal,
    decode_floats,
    encode_floats,
)
from trainer.mdp import Step, ToolCallRecord, Trajectory

__all__ = [
    "CheckpointRecord",
    "ClaimRequest",
    "Heartbeat",
    "LogChunk",
    "MetricBatch",
    "MetricPoint",
    "RunStatus",
    "StatusUpdate",
    "StepSignalsWire",
    "StepWire",
    "TokenSignalsBatch",
    "TokenSignalsWire",
    "ToolCallWire",
    "TrajectoryBatch",
    "TrajectoryWire",
    "Wire",
    "new_batch_id",
    "new_claimant_id",
    "to_floats",
    "to_jsonable",
]

RunStatus = Literal["starting", "running", "succeeded", "failed", "cancelled"]


def new_batch_id() -> str:
    return uuid.uuid4().hex


class Wire(BaseModel):
    # NaN and infinities travel as the strings "NaN"/"Infinity" (plain JSON has no such numbers);
    # pydantic reads them back as floats. A NaN loss is news the user must see, not drop.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class MetricPoint(Wire):
    key: str = Field(
        min_length=1,
        max_length=METRIC_KEY_MAX,
        pattern=r"^[^\x00]+$",
        description="Namespaced metric key, e.g. reward/mean.",
    )
    step: int = Field(ge=0, le=INT4_MAX, description="Training step the value belongs to.")
    value: float = Field(description="The value (NaN and ±Infinity are kept).")
    ts: float = Field(description="Unix time the trainer logged it.")


class MetricBatch(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    points: list[MetricPoint] = Field(description="Points in the order they were logged.")


class ToolCallWire(Wire):
    name: Annotated[str, cut_to(ID_MAX)] = Field(description="The tool the model called (cut to 200).")
    arguments: JsonField = None
    result: Text = ""
    error: Annotated[str, cut_to(TOOL_ERROR_MAX)] | None = None
    reward: float | None = None
    latency_s: float = 0.0
    info: JsonObject = Field(default_factory=dict)


class TokenSignalsWire(Wire):
    """One step's response tokens (their text) and what the update computed for each of them.

    ``tokens`` may be left out only where the signals are added to a step stored earlier
    (:class:`StepSignalsWire`): they then count the tokens stored with it.
    """

    tokens: list[Annotated[str, cut_to(TOKEN_TEXT_MAX)]] | None = Field(
        default=None,
        max_length=TOKEN_SIGNALS_MAX_TOKENS,
        description="Each response token's text, in order; null: the tokens the step already has.",
    )
    signals: dict[TokenSignal, str] = Field(
        description="Per signal: base64 of little-endian float32, one value per token."
    )

    @model_validator(mode="after")
    def _one_value_per_token(self) -> TokenSignalsWire:
        counts = set()
        for name, encoded in self.signals.items():
            try:
                count = len(decode_floats(encoded))
            except ValueError as error:
                raise ValueError(f"signals.{name} {error}") from None
            if self.tokens is not None and count != len(self.tokens):
                raise ValueError(f"signals.{name} has {count} values for {len(self.tokens)} tokens")
            counts.add(count)
        if self.tokens is None and len(counts) != 1:
            raise ValueError("signals without tokens must be at least one array, all of one length")
        return self

    def decoded(self) -> dict[str, list[float]]:
        return {name: decode_floats(encoded) for name, encoded in self.signals.items()}

    @classmethod
    def of(cls, tokens: Sequence[str] | None, signals: Mapping[str, Sequence[float]]) -> TokenSignalsWire:
        return cls.model_validate(
            {
                "tokens": None if tokens is None else list(tokens),
                "signals": {k: encode_floats(v) for k, v in signals.items()},
            }
        )


class StepWire(Wire):
    """One LLM call of a trajectory, as the rollout viewer shows it. Token ids are optional (size)."""

    index: Count = Field(description="Position of the step in its trajectory.")
    prompt_text: Text = ""
    response_text: Text = ""
    reward: float | None = None
    done: bool = False
    advantage: float | None = None
    value: float | None = None
    anchor: Annotated[str, cut_to(ID_MAX)] | None = None
    num_prompt_tokens: Count = 0
    num_response_tokens: Count = 0
    info: JsonObject = Field(default_factory=dict)
    timings: JsonFloats = Field(default_factory=dict)
    tool_calls: list[ToolCallWire] = Field(default_factory=list)
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    response_mask: list[int] | None = None
    rollout_log_probs: list[JsonFloat] | None = None
    token_signals: TokenSignalsWire | None = Field(
        default=None,
        description="Per-token signals of the update, for the trajectories the run keeps them of.",
    )

    @model_validator(mode="after")
    def _signals_name_their_tokens(self) -> StepWire:
        if self.token_signals is not None and self.token_signals.tokens is None:
            raise ValueError("token_signals of a step sent with its trajectory must carry the tokens")
        return self


class TrajectoryWire(Wire):
    """mdp.Trajectory on the wire."""

    id: Identifier
    group_id: Identifier
    sample_index: Count
    rollout_index: Count = 0
    data_source: Annotated[str, Field(max_length=DATA_SOURCE_MAX), AfterValidator(no_nul)] = ""
    ground_truth: JsonField = None
    total_reward: float = 0.0
    metrics: JsonFloats = Field(default_factory=dict)
    info: JsonObject = Field(default_factory=dict)
    steps: list[StepWire] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_step_per_index(self) -> TrajectoryWire:
        seen: set[int] = set()
        for position, step in enumerate(self.steps):
            if step.index in seen:
                raise ValueError(
                    f"steps[{position}].index {step.index} appears twice: a step's index is unique"
                )
            seen.add(step.index)
        return self

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, *, include_token_ids: bool = False) -> TrajectoryWire:
        return cls(
            id=trajectory.id,
            group_id=trajectory.group_id,
            sample_index=trajectory.sample_index,
            rollout_index=trajectory.rollout_index,
            data_source=trajectory.data_source,
            ground_truth=to_jsonable(trajectory.ground_truth),
            total_reward=trajectory.total_reward,
            metrics=to_floats(trajectory.metrics),
            info=to_jsonable(trajectory.info),
            steps=[_step_wire(i, step, include_token_ids) for i, step in enumerate(trajectory.steps)],
        )


def _step_wire(index: int, step: Step, include_token_ids: bool) -> StepWire:
    tokens: dict[str, Any] = {}
    if include_token_ids:
        tokens = {
            "prompt_ids": list(step.prompt_ids),
            "response_ids": list(step.response_ids),
            "response_mask": list(step.response_mask),
            "rollout_log_probs": [float(x) for x in step.rollout_log_probs],
        }
    return StepWire(
        index=index,
        prompt_text=step.prompt_text,
        response_text=step.response_text,
        reward=None if step.reward is None else float(step.reward),
        done=step.done,
        advantage=None if step.advantage is None else float(step.advantage),
        value=None if step.value is None else float(step.value),
        anchor=step.anchor,
        num_prompt_tokens=len(step.prompt_ids),
        num_response_tokens=len(step.response_ids),
        info=to_jsonable(step.info),
        timings=to_floats(step.timings),
        tool_calls=[_tool_call_wire(call) for call in step.tool_calls],
        token_signals=(
            TokenSignalsWire.of(step.token_texts, step.token_signals) if step.token_signals else None
        ),
        **tokens,
    )


def _tool_call_wire(call: ToolCallRecord) -> ToolCallWire:
    return ToolCallWire(
        name=call.name,
        arguments=to_jsonable(call.arguments),
        result=call.result,
        error=call.error,
        reward=None if call.reward is None else float(call.reward),
        latency_s=float(call.latency_s),
        info=to_jsonable(call.info),
    )


class TrajectoryBatch(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    training_step: Count = Field(description="Training step whose rollouts these are.")
    trajectories: list[TrajectoryWire]


class StepSignalsWire(Wire):
    """The per-token signals (and the advantage) of one step of a trajectory stored earlier: what a
    backend whose update runs after the trajectory was reported sends once it has them.

    The signals add to those the step has; one sent again replaces its values. Several senders may
    each send some (verl: the driver sends the tokens with advantage, log-prob, entropy and KL, the
    actor workers the ratio and clip decision without the tokens).
    """

    trajectory_id: Identifier = Field(description="The trajectory's id (TrajectoryWire.id).")
    step_index: Count = Field(description="The step's index in that trajectory (StepWire.index).")
    advantage: float | None = Field(default=None, description="The step's advantage, mean over its tokens.")
    token_signals: TokenSignalsWire


class TokenSignalsBatch(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    steps: list[StepSignalsWire]


class ClaimRequest(Wire):
    worker: Identifier = Field(description="The claiming process, host:pid, shown on the run's page.")
    claimant: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description=f"The launch's claimant id ({CLAIMANT_ENV}): a retried claim with the same id is its "
        f"own, and every later call that changes the run carries it in the {CLAIMANT_HEADER} header.",
    )


def new_claimant_id() -> str:
    return uuid.uuid4().hex


class StatusUpdate(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    status: RunStatus
    message: Text = ""
    progress: float | None = Field(default=None, ge=0.0, le=1.0, description="Fraction of the run done.")


class Heartbeat(Wire):
    step: Count
    total_steps: Count
    ts: float


class LogChunk(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    seq: Count = Field(description="Chunks are numbered from 0 in order within one trainer process.")
    text: Text


class CheckpointRecord(Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    step: Count
    path: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(no_nul)]
    metrics: JsonFloats = Field(default_factory=dict)
    size_bytes: int | None = Field(default=None, ge=0, description="Bytes of every file in the checkpoint.")
    deleted: bool = Field(
        default=False,
        description="The trainer deleted this checkpoint (trainer.keep_checkpoints): the record of its step "
        "is kept, its files are gone.",
    )


def to_floats(values: Mapping[str, Any]) -> dict[str, float]:
    # Metric values arrive as Python, numpy or 0-d torch numbers; float() takes all of them.
    return {str(key): float(value) for key, value in values.items()}


def json_object(text: str, where: str) -> dict[str, Any]:
    """``text`` parsed as one JSON object, or a ValueError that names ``where`` (a file's line, a column)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object, not {type(value).__name__}")
    return value


def to_jsonable(value: Any) -> Any:
    """Info dicts may hold numpy or torch scalars, tuples or other objects; make them plain JSON values."""

    def fallback(obj: Any) -> Any:
        for method in ("item", "tolist"):
            if hasattr(obj, method):
                return getattr(obj, method)()
        return str(obj)

    return json.loads(json.dumps(value, default=fallback))
