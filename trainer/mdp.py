"""Step-level MDP records (Agent-R1, docs/algorithms.md#the-step-level-mdp).

State s_t is the full prompt the environment presents at step t; action a_t is the whole LLM
response of that step. One :class:`Step` is recorded per LLM call; a :class:`Trajectory` is the
ordered steps of one episode; a group is the n trajectories sampled for one prompt (same
``group_id``). Everything here is plain data that round-trips through JSON for the webapp.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]  # {"role": ..., "content": ..., optional "tool_calls"/"name"}


@dataclass
class Observation:
    """What the environment shows the agent: chat messages, plus the tools it may call."""

    messages: list[Message]
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI-style function schemas
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Action:
    """The whole LLM response of one step."""

    text: str
    token_ids: list[int] = field(default_factory=list)


@dataclass
class ToolCallRecord:
    """One tool call parsed from a response, with what running it gave back."""

    name: str
    arguments: Any  # the parsed arguments (dict when well-formed), or the raw text when malformed
    result: str = ""
    error: str | None = None  # "malformed", "unknown_tool", "invalid_arguments", "execution", "timeout"
    reward: float | None = None
    latency_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One LLM call: the prompt it saw, the tokens it produced, and what the env made of them.

    ``reward`` None means "score this step with the reward function". ``response_mask`` is 1 for
    model-generated tokens. The step's scalar reward sits on its last response token.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    rollout_log_probs: list[float] = field(default_factory=list)
    reward: float | None = None
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    prompt_text: str = ""
    response_text: str = ""
    # Filled by the trainer after advantage estimation (for the rollout viewer).
    advantage: float | None = None
    value: float | None = None
    anchor: str | None = None  # observation key shared across a group's steps (GiGPO)
    # Filled by the trainer for the trajectories whose per-token signals it keeps (report.token_signals):
    # each response token's text and {signal: one value per token} (trainer.contract.TOKEN_SIGNALS).
    token_texts: list[str] = field(default_factory=list)
    token_signals: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.response_mask) != len(self.response_ids):
            raise ValueError(
                f"response_mask has {len(self.response_mask)} entries but response_ids has {len(self.response_ids)}"
            )

    @property
    def anchor_id(self) -> int:
        """GiGPO's anchor observation of this step as a 63-bit id; both backends group steps by it.

        The state is the step's full prompt, so equal prompts are one anchor state; a flow that names
        the anchor itself (``anchor``) is keyed by that name instead. A 63-bit id fits the int64
        tensors that carry it through verl (collisions: about n^2 / 2^64 for n distinct states).
        """
        if self.anchor is not None:
            key = b"anchor:" + self.anchor.encode()
        else:
            key = b"prompt:" + array.array("q", self.prompt_ids).tobytes()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


@dataclass
class Trajectory:
    """The ordered steps of one episode.

    ``group_id`` is the prompt uid shared by the n samples of one prompt; ``sample_index`` is
    the dataset row (``extra_info.index``); ``rollout_index`` numbers the n samples of the group.
    """

    id: str
    group_id: str
    sample_index: int
    rollout_index: int = 0
    data_source: str = ""
    steps: list[Step] = field(default_factory=list)
    ground_truth: Any = None
    metrics: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        """R(τ) = Σ_t r_t, treating unscored steps as 0."""
        return float(sum(step.reward or 0.0 for step in self.steps))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        steps = []
        for raw_step in data.pop("steps", []):
            raw_step = dict(raw_step)
            calls = [ToolCallRecord(**call) for call in raw_step.pop("tool_calls", [])]
            steps.append(Step(**raw_step, tool_calls=calls))
        return cls(**data, steps=steps)

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        return cls.from_dict(json.loads(text))
