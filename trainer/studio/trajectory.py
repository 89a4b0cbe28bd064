"""``Run.log_trajectory``'s arguments as the trajectory wire model the ingestion route takes
(docs/sdk.md#trajectories): a rollout is a prompt and its steps; a step is one model response with
the tool calls it made and their results, and its reward."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from trainer.contract import StepWire, ToolCallWire, TrajectoryWire, to_jsonable


def prompt_text(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """Text as is; chat messages one per line as ``role: content``."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in prompt)


def step_wire(index: int, step: str | Mapping[str, Any], prompt: str, last: bool) -> StepWire:
    given: Mapping[str, Any] = {"response": step} if isinstance(step, str) else step
    calls = [
        ToolCallWire(**{k: to_jsonable(v) for k, v in call.items()}) for call in given.get("tool_calls", [])
    ]
    reward = given.get("reward")
    return StepWire(
        index=index,
        prompt_text=prompt_text(given.get("prompt", prompt if index == 0 else "")),
        response_text=str(given.get("response", "")),
        reward=None if reward is None else float(reward),
        done=bool(given.get("done", last)),
        info=to_jsonable(dict(given.get("info", {}))),
        tool_calls=calls,
    )


def trajectory_wire(
    prompt: str | Sequence[Mapping[str, Any]],
    steps: Sequence[str | Mapping[str, Any]],
    *,
    sample_index: int,
    reward: float | None = None,
    id: str | None = None,
    group: str | None = None,
    ground_truth: Any = None,
    data_source: str = "",
    info: Mapping[str, Any] | None = None,
) -> TrajectoryWire:
    """The rollout as one TrajectoryWire; its reward defaults to the sum of its steps' rewards.
    ValueError naming the field the server would refuse."""
    text = prompt_text(prompt)
    try:
        wires = [step_wire(i, step, text, i == len(steps) - 1) for i, step in enumerate(steps)]
        own_id = id or uuid.uuid4().hex
        total = reward if reward is not None else sum(s.reward for s in wires if s.reward is not None)
        return TrajectoryWire(
            id=own_id,
            group_id=group or own_id,
            sample_index=sample_index,
            data_source=data_source,
            ground_truth=to_jsonable(ground_truth),
            total_reward=float(total),
            info=to_jsonable(dict(info or {})),
            steps=wires,
        )
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"])) or "trajectory"
        raise ValueError(f"log_trajectory: {where}: {first['msg']}") from None
    except TypeError as error:  # a tool call with a field ToolCallWire lacks, a step that is not a dict
        raise ValueError(f"log_trajectory: {error}") from None
