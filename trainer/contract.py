"""The trainer ↔ web app contract: one module both sides import, so nothing is spelled twice.

It holds the API paths a launched trainer calls, the environment variables a launched run reads,
the run statuses the trainer reports, the metric-key names with the one alias table for verl's keys,
and the pydantic wire models of every body the trainer sends. The Django routes are mounted from
these paths; the executors set these variables; the reporters send these models.

What Postgres cannot store never reaches it (docs/security.md#limits): integers stored in integer
columns lie in 0..2**31 - 1, identifiers fit their columns and are refused otherwise, text the model or a
tool produced is cut to its column, NUL characters become U+FFFD, NaN and ±Infinity inside JSON
fields become null (jsonb has no such numbers; the float columns of metric points keep them), and
JSON nested deeper than ``JSON_MAX_DEPTH`` is refused. A refusal is a 400 naming the field, which the
reporter does not retry (docs/security.md#refusals).

Every batch the trainer POSTs carries a ``batch_id`` (also sent as the ``Idempotency-Key`` header): a
replayed batch has the same id, so the server can answer 2xx without storing it twice. The calls
about the run's life need none: a claim retried by its own worker is answered yes again, the first
terminal status wins, and a status message or a heartbeat sent twice changes nothing more.

Only the process that claimed the run may change it: the claim records the launch's claimant id
(``CLAIMANT_ENV``), and every status, heartbeat and ingestion call carries it in ``CLAIMANT_HEADER``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
import uuid
from array import array
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, model_validator

from trainer.mdp import Step, ToolCallRecord, Trajectory

# -- environment of a launched run ----------------------------------------------------------------

TOKEN_ENV = "STUDIO_RUN_TOKEN"  # the run's own API token (never in the frozen config)
API_ENV = "STUDIO_API_URL"  # the web app's base URL, as the trainer reaches it
RUN_ID_ENV = "STUDIO_RUN_ID"  # the run's primary key
PROJECT_ENV = "STUDIO_PROJECT"  # the experiment's name (verl's trainer.project_name)
# MLflow's own variables: verl's Tracking reads them and attaches to the run
# (docs/verl.md#tracking-and-mlflow).
MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
MLFLOW_TRACKING_TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
MLFLOW_RUN_ID_ENV = "MLFLOW_RUN_ID"
# The launch's claimant id: one per start of the run, the same in every process of that start (the
# trainer and, for verl, its Ray workers). The trainer claims the run with it and sends it with every
# call that changes the run; a process of another start is refused (docs/reliability.md#claimant).
CLAIMANT_ENV = "STUDIO_CLAIMANT"

# -- metric keys ----------------------------------------------------------------------------------
# Namespaced keys shared by the trainer and the UI. verl logs some of the same quantities under its
# own names; VERL_KEY_ALIASES maps them to ours once, as they arrive (see canonical_key), so nothing
# downstream of ingestion knows verl's spellings.

REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
REWARD_MAX = "reward/max"
REWARD_MIN = "reward/min"
RESPONSE_LENGTH_MEAN = "response_length/mean"  # generated tokens per trajectory (verl: the same key)
NUM_TURNS_MEAN = "num_turns/mean"
TOOLS_CALLS_PER_TRAJ = "tools/calls_per_traj"
TOOLS_ERROR_RATE = "tools/error_rate"
TOOLS_MALFORMED_RATE = "tools/malformed_rate"
ROLLOUT_EMPTY_TRAJECTORIES = "rollout/empty_trajectories"
# Steps whose reward could not be computed (a remote reward that timed out or failed); they score 0.
REWARD_ERRORS = "reward/errors"
ACTOR_PG_LOSS = "actor/pg_loss"
ACTOR_KL = "actor/kl"  # KL to the reference policy, as the loss term computes it
ACTOR_ENTROPY = "actor/entropy"
ACTOR_CLIPFRAC = "actor/clipfrac"
ACTOR_CLIPFRAC_LOWER = "actor/clipfrac_lower"
ACTOR_GRAD_NORM = "actor/grad_norm"
ACTOR_LR = "actor/lr"
CRITIC_VALUE_LOSS = "critic/value_loss"
TIMING_ROLLOUT_S = "timing/rollout_s"
TIMING_UPDATE_S = "timing/update_s"
TIMING_STEP_S = "timing/step_s"
TIMING_VAL_S = "timing/val_s"
# Where a step's time goes (docs/health.md#time-breakdown): both backends report these parts of
# timing/step_s; what they leave unexplained is shown as waiting.
TIMING_GENERATE_S = "timing/generate_s"  # the model generating (engine or vLLM busy)
TIMING_ENV_S = "timing/env_s"  # environments and tools, between generations
TIMING_REWARD_S = "timing/reward_s"  # the reward function
TIMING_OLD_LOG_PROB_S = "timing/old_log_prob_s"  # the no-grad pass for π_old
TIMING_REF_S = "timing/ref_s"  # the reference model's pass
TIMING_VALUES_S = "timing/values_s"  # the critic's no-grad pass
TIMING_ADV_S = "timing/adv_s"  # the advantage estimator
TIMING_UPDATE_CRITIC_S = "timing/update_critic_s"
TIMING_UPDATE_ACTOR_S = "timing/update_actor_s"
TIMING_SYNC_WEIGHTS_S = "timing/sync_weights_s"  # verl: new weights to the rollout servers
TIMING_CHECKPOINT_S = "timing/checkpoint_s"
TIME_BREAKDOWN_KEYS: tuple[str, ...] = (
    TIMING_GENERATE_S, TIMING_ENV_S, TIMING_REWARD_S, TIMING_OLD_LOG_PROB_S, TIMING_REF_S, TIMING_VALUES_S,
    TIMING_ADV_S, TIMING_UPDATE_CRITIC_S, TIMING_UPDATE_ACTOR_S, TIMING_SYNC_WEIGHTS_S, TIMING_CHECKPOINT_S,
)  # fmt: skip
PERF_SAMPLES_PER_S = "perf/samples_per_s"
PERF_GENERATED_TOKENS = "perf/generated_tokens"
PERF_TOKENS_PER_S = "perf/tokens_per_s"  # generated tokens per second of generation time
ROLLOUT_ZERO_VARIANCE_GROUPS = "rollout/zero_variance_groups"  # share of groups whose rewards are all equal
VAL_PREFIX = "val/"
VAL_METRIC = "acc"  # a trajectory's validation score: the reward function's acc, else its reward


# What an evaluation run reports once, at its last step (docs/evaluations.md#metrics). k is its
# samples per prompt (rollout.n); pass@1 and pass@k are the unbiased estimates of trainer.evaluation.
EVAL_ACC = "eval/acc"  # the mean of every sample's acc (VAL_METRIC's rule)
EVAL_PASS_AT_1 = "eval/pass@1"
EVAL_PASS_AT_K = "eval/pass@k"
EVAL_REWARD_MEAN = "eval/reward_mean"
EVAL_PROMPTS = "eval/prompts"
EVAL_K = "eval/k"
EVAL_KEYS = (EVAL_ACC, EVAL_PASS_AT_1, EVAL_PASS_AT_K, EVAL_REWARD_MEAN, EVAL_PROMPTS, EVAL_K)
# A sample passes (pass@k; a stored trajectory's success) when its acc is at least this.
PASS_THRESHOLD = 0.5
TRAJECTORY_ACC = "acc"  # the trajectory metric an evaluation records each sample's acc under


def val_key(task: str, metric: str = VAL_METRIC) -> str:
    """The validation key of one task: ``val/<task>/acc``."""
    return f"{VAL_PREFIX}{task}/{metric}"


# verl's key → ours, for keys that name the same quantity (verl 0.9.1: trainer/ppo/metric_utils.py,
# trainer/ppo/core_algos.py, workers/utils/losses.py). Keys verl and we spell alike (actor/pg_loss,
# actor/entropy, actor/grad_norm, actor/lr, actor/ppo_kl, response_length/mean, critic/advantages/*)
# need no entry.
VERL_KEY_ALIASES: Mapping[str, str] = {
    "critic/score/mean": REWARD_MEAN,  # verl's score is the reward function's R(τ), ours too
    "critic/score/max": REWARD_MAX,
    "critic/score/min": REWARD_MIN,
    "actor/pg_clipfrac": ACTOR_CLIPFRAC,
    "actor/pg_clipfrac_lower": ACTOR_CLIPFRAC_LOWER,
    "actor/kl_loss": ACTOR_KL,
    "critic/vf_loss": CRITIC_VALUE_LOSS,
    "timing_s/gen": TIMING_ROLLOUT_S,
    "timing_s/step": TIMING_STEP_S,
    "timing_s/testing": TIMING_VAL_S,
    # verl's phases: the marked_timer names of trainer/ppo/v1/trainer_base.py and ray_trainer.py (its
    # reference pass is str(Role.RefPolicy), "ref"); the agent loop's per-trajectory means of
    # experimental/agent_loop/agent_loop.py reach timing_s/ only through ray_trainer.py
    # (docs/health.md#time-breakdown).
    "timing_s/agent_loop/generate_sequences/mean": TIMING_GENERATE_S,
    "timing_s/agent_loop/tool_calls/mean": TIMING_ENV_S,
    "timing_s/reward": TIMING_REWARD_S,
    "timing_s/old_log_prob": TIMING_OLD_LOG_PROB_S,
    "timing_s/ref": TIMING_REF_S,
    "timing_s/values": TIMING_VALUES_S,
    "timing_s/adv": TIMING_ADV_S,
    "timing_s/update_critic": TIMING_UPDATE_CRITIC_S,
    "timing_s/update_actor": TIMING_UPDATE_ACTOR_S,
    "timing_s/update_weights": TIMING_SYNC_WEIGHTS_S,
    "timing_s/save_checkpoint": TIMING_CHECKPOINT_S,
}
# verl's validation key: val-core/<data_source>/<var>/mean@N, where var is acc when the reward
# function gives one, else reward (our rule for val/<task>/acc too) and N the samples per prompt;
# verl's MLflow logger writes "@" as "_at_". Only the largest N is in val-core.
VERL_VAL_KEY = re.compile(r"^val-core/(?P<task>[^/]+)/(?:acc|reward)/mean(?:@|_at_)\d+$")


def canonical_key(key: str) -> str | None:
    """Our name for a verl metric key, or None when the key has no alias."""
    if key in VERL_KEY_ALIASES:
        return VERL_KEY_ALIASES[key]
    match = VERL_VAL_KEY.match(key)
    if match:
        return val_key(match["task"])
    return None


# -- API paths ------------------------------------------------------------------------------------
# Every path the trainer calls, under the root where the web app mounts its JSON API; the web app
# mounts its routes from these (webapp.api.route) and verl's MLflow client is pointed at MLFLOW_ROOT.

API_ROOT = "/api"
MLFLOW_ROOT = "/mlflow"
_RUN = API_ROOT + "/runs/{run_id}"
_INGEST = API_ROOT + "/ingest/runs/{run_id}"
# The run's life: the trainer claims it, reads it, says how it goes.
CLAIM_PATH = _RUN + "/claim"
CONFIG_PATH = _RUN + "/config"
DATASET_PATH = _RUN + "/dataset/{split}"
STATUS_PATH = _RUN + "/status"
HEARTBEAT_PATH = _RUN + "/heartbeat"
# The team tools and team rewards the run's config names, secrets included (RunSpecs): only for a
# claimed run, over its own token; never stored in the frozen config, a log or a trajectory.
SPECS_PATH = _RUN + "/specs"
# What the run produces.
METRICS_PATH = _INGEST + "/metrics"
TRAJECTORIES_PATH = _INGEST + "/trajectories"
LOGS_PATH = _INGEST + "/logs"
CHECKPOINTS_PATH = _INGEST + "/checkpoints"
# Per-token signals of steps reported before their update ran (verl: docs/verl.md#token-signals).
TOKEN_SIGNALS_PATH = _INGEST + "/token-signals"
TRAINER_PATHS: tuple[str, ...] = (
    CLAIM_PATH, CONFIG_PATH, DATASET_PATH, STATUS_PATH, HEARTBEAT_PATH, SPECS_PATH,
    METRICS_PATH, TRAJECTORIES_PATH, LOGS_PATH, CHECKPOINTS_PATH, TOKEN_SIGNALS_PATH,
)  # fmt: skip
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Sent with every lifecycle and ingestion call after the claim; the server answers 409 to any other.
CLAIMANT_HEADER = "Studio-Claimant"

RunStatus = Literal["starting", "running", "succeeded", "failed", "cancelled"]


def new_batch_id() -> str:
    return uuid.uuid4().hex


# -- what the database can hold -------------------------------------------------------------------

INT4_MAX = 2**31 - 1  # the largest value of a Postgres integer column (steps, indices, counts)
BATCH_ID_MAX = 64  # the column of stored batch ids
ID_MAX = 200  # trajectory ids, group ids, anchors, tool names
DATA_SOURCE_MAX = 100
TOOL_ERROR_MAX = 100
METRIC_KEY_MAX = 200
JSON_MAX_DEPTH = 64
REPLACEMENT = "\ufffd"
BATCH_ID_PATTERN = re.compile(r"^[\x21-\x7e]{1,64}$")  # printable ASCII, no spaces: a header value too


def clean_text(value: str) -> str:
    """Postgres text cannot hold NUL: it becomes U+FFFD, so the text stays and the spot shows."""
    return value.replace("\x00", REPLACEMENT) if "\x00" in value else value


def _cut(limit: int) -> AfterValidator:
    return AfterValidator(lambda value: clean_text(value)[:limit])


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def finite_or_none(value: float | None) -> float | None:
    """jsonb has no NaN or ±Infinity: inside JSON fields they are stored as null."""
    return value if value is None or math.isfinite(value) else None


def jsonb_safe(value: Any, depth: int = 0) -> Any:
    """A JSON value Postgres' jsonb can store: NUL in strings and keys replaced, non-finite numbers
    null; ValueError when nested deeper than JSON_MAX_DEPTH."""
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {JSON_MAX_DEPTH} levels")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): jsonb_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonb_safe(v, depth + 1) for v in value]
    return value


Count = Annotated[int, Field(ge=0, le=INT4_MAX)]  # what an integer column holds, from 0
Text = Annotated[str, AfterValidator(clean_text)]
Identifier = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(_no_nul)]
BatchId = Annotated[
    str, Field(pattern=BATCH_ID_PATTERN.pattern, description="Idempotency key of this batch.")
]
JsonField = Annotated[JsonValue, AfterValidator(jsonb_safe)]
JsonFloat = Annotated[float | None, AfterValidator(finite_or_none)]
JsonObject = Annotated[dict[str, JsonValue], AfterValidator(jsonb_safe)]
JsonFloats = Annotated[Mapping[str, JsonFloat], AfterValidator(jsonb_safe)]


# -- wire schema ----------------------------------------------------------------------------------


class _Wire(BaseModel):
    # NaN and infinities travel as the strings "NaN"/"Infinity" (plain JSON has no such numbers);
    # pydantic reads them back as floats. A NaN loss is news the user must see, not drop.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class MetricPoint(_Wire):
    key: str = Field(
        min_length=1,
        max_length=METRIC_KEY_MAX,
        pattern=r"^[^\x00]+$",
        description="Namespaced metric key, e.g. reward/mean.",
    )
    step: int = Field(ge=0, le=INT4_MAX, description="Training step the value belongs to.")
    value: float = Field(description="The value (NaN and ±Infinity are kept).")
    ts: float = Field(description="Unix time the trainer logged it.")


class MetricBatch(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    points: list[MetricPoint] = Field(description="Points in the order they were logged.")


class ToolCallWire(_Wire):
    name: Annotated[str, _cut(ID_MAX)] = Field(description="The tool the model called (cut to 200).")
    arguments: JsonField = None
    result: Text = ""
    error: Annotated[str, _cut(TOOL_ERROR_MAX)] | None = None
    reward: float | None = None
    latency_s: float = 0.0
    info: JsonObject = Field(default_factory=dict)


# -- per-token signals (docs/rollouts.md#token-signals) ----------------------------------------------
# What the update computed for each response token, so the trajectory page can colour the tokens:
# the advantage, the log-prob under the rollout policy (π_old, as the update used it), the importance
# ratio and the entropy at update time, whether the clipped surrogate was taken (1/0), and the KL to
# the reference. Each travels as base64 of little-endian float32 (4 bytes a token, exact), the same
# bytes the web app stores, compressed.

TokenSignal = Literal["advantage", "log_prob", "ratio", "entropy", "clipped", "kl"]
TOKEN_SIGNALS: tuple[TokenSignal, ...] = ("advantage", "log_prob", "ratio", "entropy", "clipped", "kl")
TOKEN_SIGNALS_MAX_TOKENS = 65_536  # tokens of one step's response that signals are kept for
TOKEN_TEXT_MAX = 200  # characters of one token's text (a token is a few characters; the rest is noise)


def encode_floats(values: Sequence[float]) -> str:
    """base64 of little-endian float32: the one encoding of a per-token array on the wire."""
    packed = array("f", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def decode_floats(text: str) -> list[float]:
    """The floats of :func:`encode_floats`; ValueError when the text is not such an array."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("is not base64") from None
    if len(raw) % 4:
        raise ValueError("is not a float32 array (length not a multiple of 4 bytes)")
    packed = array("f")
    packed.frombytes(raw)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tolist()


class TokenSignalsWire(_Wire):
    """One step's response tokens (their text) and what the update computed for each of them.

    ``tokens`` may be left out only where the signals are added to a step stored earlier
    (:class:`StepSignalsWire`): they then count the tokens stored with it.
    """

    tokens: list[Annotated[str, _cut(TOKEN_TEXT_MAX)]] | None = Field(
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


class StepWire(_Wire):
    """One LLM call of a trajectory, as the rollout viewer shows it. Token ids are optional (size)."""

    index: Count = Field(description="Position of the step in its trajectory.")
    prompt_text: Text = ""
    response_text: Text = ""
    reward: float | None = None
    done: bool = False
    advantage: float | None = None
    value: float | None = None
    anchor: Annotated[str, _cut(ID_MAX)] | None = None
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


class TrajectoryWire(_Wire):
    """mdp.Trajectory on the wire."""

    id: Identifier
    group_id: Identifier
    sample_index: Count
    rollout_index: Count = 0
    data_source: Annotated[str, Field(max_length=DATA_SOURCE_MAX), AfterValidator(_no_nul)] = ""
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


class TrajectoryBatch(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    training_step: Count = Field(description="Training step whose rollouts these are.")
    trajectories: list[TrajectoryWire]


class StepSignalsWire(_Wire):
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


class TokenSignalsBatch(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    steps: list[StepSignalsWire]


class ClaimRequest(_Wire):
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


class StatusUpdate(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    status: RunStatus
    message: Text = ""
    progress: float | None = Field(default=None, ge=0.0, le=1.0, description="Fraction of the run done.")


class Heartbeat(_Wire):
    step: Count
    total_steps: Count
    ts: float


class LogChunk(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    seq: Count = Field(description="Chunks are numbered from 0 in order within one trainer process.")
    text: Text


class CheckpointRecord(_Wire):
    batch_id: BatchId = Field(default_factory=new_batch_id)
    step: Count
    path: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_no_nul)]
    metrics: JsonFloats = Field(default_factory=dict)
    size_bytes: int | None = Field(default=None, ge=0, description="Bytes of every file in the checkpoint.")
    deleted: bool = Field(
        default=False,
        description="The trainer deleted this checkpoint (trainer.keep_checkpoints): the record of its step "
        "is kept, its files are gone.",
    )


class TeamToolSpec(_Wire):
    """A team tool as the run receives it (docs/tools.md#team-tools-in-runs): an HTTP endpoint, or a
    staff-registered ``module:Class`` the trainer imports."""

    name: str = Field(min_length=1, max_length=64)
    description: str = ""
    parameters: dict[str, JsonValue] = Field(description="JSON Schema (type object) of the arguments.")
    kind: Literal["http", "python"]
    url: str = ""
    method: Literal["GET", "POST"] = "POST"
    timeout_s: float = Field(default=10.0, gt=0)
    secret: str | None = Field(
        default=None, description="Sent as the secret header; never stored by the run."
    )
    secret_header: str = "X-Tool-Secret"
    entry_point: str = Field(default="", description="python kind: package.module:Class.")

    def __repr__(self) -> str:  # the secret must never reach a log line
        return f"TeamToolSpec(name={self.name!r}, kind={self.kind!r}, url={self.url!r})"

    __str__ = __repr__


class TeamRewardSpec(_Wire):
    """A team reward (docs/rewards.md#team-rewards): a rule kind with an optional format bonus, or a
    remote endpoint that answers a POST of (data_source, response, ground_truth, extra_info)."""

    name: str = Field(min_length=1, max_length=64)
    data_source: str = Field(default="", description="The data_source it scores by default; blank: none.")
    kind: Literal["rule", "remote"]
    rule: Literal["exact", "numeric", "contains", "regex", "f1"] = "exact"
    tolerance: float = Field(default=0.0, ge=0)
    pattern: str = Field(default="", description="regex rule: what to extract (group 1, else the match).")
    format_pattern: str = Field(default="", description="A response matching this regex earns the bonus.")
    format_bonus: float = 0.0
    url: str = ""
    timeout_s: float = Field(default=10.0, gt=0)
    retries: int = Field(default=1, ge=0, le=5)
    secret: str | None = None
    secret_header: str = "X-Reward-Secret"

    def __repr__(self) -> str:
        return f"TeamRewardSpec(name={self.name!r}, kind={self.kind!r})"

    __str__ = __repr__


class OutboundRules(_Wire):
    """The web app's outbound policy (trainer.tools.allowlist.OutboundPolicy), as it travels to a run."""

    rules: list[str] = Field(
        default_factory=list, description="STUDIO_TOOL_ALLOWLIST entries: host:port or URL prefixes."
    )
    services: list[tuple[str, int]] = Field(
        default_factory=list,
        description="The product's own service endpoints, closed whatever the rules say.",
    )


class RunSpecs(_Wire):
    """What GET SPECS_PATH answers: the run's team tools and rewards, and where they may send requests."""

    tools: list[TeamToolSpec] = Field(default_factory=list)
    rewards: list[TeamRewardSpec] = Field(default_factory=list)
    outbound: OutboundRules = Field(
        default_factory=OutboundRules, description="Checked again, with the resolved address, at every call."
    )

    def __repr__(self) -> str:
        return f"RunSpecs(tools={[t.name for t in self.tools]}, rewards={[r.name for r in self.rewards]})"

    __str__ = __repr__


def to_floats(values: Mapping[str, Any]) -> dict[str, float]:
    # Metric values arrive as Python, numpy or 0-d torch numbers; float() takes all of them.
    return {str(key): float(value) for key, value in values.items()}


def to_jsonable(value: Any) -> Any:
    """Info dicts may hold numpy or torch scalars, tuples or other objects; make them plain JSON values."""

    def fallback(obj: Any) -> Any:
        for method in ("item", "tolist"):
            if hasattr(obj, method):
                return getattr(obj, method)()
        return str(obj)

    return json.loads(json.dumps(value, default=fallback))
