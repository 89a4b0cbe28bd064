"""Trajectories in (one batch, one transaction) and the rollout viewer's queries out."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from ninja import Schema

from trainer.contract import StepWire, TrajectoryBatch, TrajectoryWire
from webapp.experiments.models import Run
from webapp.results.models import IngestBatch, TextBlob, ToolCall, Trajectory, TrajectoryStep

TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "rollout_log_probs")
# Above this many characters two prompts are not line-diffed (difflib is quadratic on long lines): the
# new prompt is shown whole instead.
DIFF_MAX_CHARS = 50_000


@dataclass
class StoreResult:
    duplicate_batch: bool = False
    stored: int = 0
    skipped: int = 0


def success_of(wire: TrajectoryWire) -> bool:
    """Success as the task defines it: its own ``success``/``acc`` metric, else a positive return."""
    for name in ("success", "acc"):
        if name in wire.metrics:
            value = wire.metrics[name]  # None where the trainer sent NaN (contract: jsonb has no NaN)
            return value is not None and value >= 0.5
    for step in reversed(wire.steps):
        details = step.info.get("reward_details")
        acc = details.get("acc") if isinstance(details, dict) else None
        if isinstance(acc, int | float):
            return float(acc) >= 0.5
    return wire.total_reward > 0


def store_batch(run: Run, batch: TrajectoryBatch, batch_id: str) -> StoreResult:
    """Store the batch's trajectories with all their steps; ones already stored (by id) are skipped."""
    with transaction.atomic():
        if not IngestBatch.claim(run.pk, batch_id, "trajectories"):
            return StoreResult(duplicate_batch=True, skipped=len(batch.trajectories))
        uids = [t.id for t in batch.trajectories]
        known = set(Trajectory.objects.filter(run=run, uid__in=uids).values_list("uid", flat=True))
        fresh = _unique_by_id([t for t in batch.trajectories if t.id not in known])
        if fresh:
            _store(run, batch.training_step, fresh)
        return StoreResult(stored=len(fresh), skipped=len(batch.trajectories) - len(fresh))


def _unique_by_id(wires: Sequence[TrajectoryWire]) -> list[TrajectoryWire]:
    seen: dict[str, TrajectoryWire] = {}
    for wire in wires:
        seen.setdefault(wire.id, wire)
    return list(seen.values())


def _store(run: Run, training_step: int, wires: Sequence[TrajectoryWire]) -> None:
    texts = [s.prompt_text for w in wires for s in w.steps] + [
        s.response_text for w in wires for s in w.steps
    ]
    texts += [c.result for w in wires for s in w.steps for c in s.tool_calls]
    hashes = TextBlob.store_many(texts)
    rows = Trajectory.objects.bulk_create([_trajectory_row(run, training_step, w) for w in wires])
    steps: list[TrajectoryStep] = []
    calls: list[ToolCall] = []
    for row, wire in zip(rows, wires, strict=True):
        for step in wire.steps:
            steps.append(_step_row(row, step, hashes))
            calls.extend(
                ToolCall(
                    run_id=run.pk, trajectory=row, step_index=step.index, position=position,
                    training_step=training_step, name=call.name[:200], arguments=call.arguments,
                    result_id=hashes[call.result], error=call.error, reward=call.reward,
                    latency_s=call.latency_s, info=call.info,
                )
                for position, call in enumerate(step.tool_calls)
            )  # fmt: skip
    TrajectoryStep.objects.bulk_create(steps, batch_size=1000)
    ToolCall.objects.bulk_create(calls, batch_size=1000)


def _trajectory_row(run: Run, training_step: int, wire: TrajectoryWire) -> Trajectory:
    calls = [c for s in wire.steps for c in s.tool_calls]
    return Trajectory(
        run=run,
        uid=wire.id,
        group_id=wire.group_id,
        sample_index=wire.sample_index,
        rollout_index=wire.rollout_index,
        training_step=training_step,
        data_source=wire.data_source[:100],
        ground_truth=wire.ground_truth,
        total_reward=wire.total_reward,
        success=success_of(wire),
        metrics=wire.metrics,
        info=wire.info,
        num_steps=len(wire.steps),
        response_tokens=sum(s.num_response_tokens for s in wire.steps),
        num_tool_calls=len(calls),
        num_tool_errors=sum(c.error is not None for c in calls),
        num_malformed=sum(c.error == "malformed" for c in calls),
    )


def _step_row(trajectory: Trajectory, step: StepWire, hashes: dict[str, str]) -> TrajectoryStep:
    tokens = {name: getattr(step, name) for name in TOKEN_FIELDS if getattr(step, name) is not None}
    return TrajectoryStep(
        trajectory=trajectory,
        index=step.index,
        prompt_id=hashes[step.prompt_text],
        response_id=hashes[step.response_text],
        reward=step.reward,
        done=step.done,
        advantage=step.advantage,
        value=step.value,
        anchor=step.anchor,
        num_prompt_tokens=step.num_prompt_tokens,
        num_response_tokens=step.num_response_tokens,
        info=step.info,
        timings=step.timings,
        tokens=tokens or None,
    )


# -- the viewer -------------------------------------------------------------------------------------


class RolloutFilter(Schema):
    """The rollout list's filters, from query parameters; every field optional. The viewer's form
    and the REST API (as its query schema) share it."""

    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    success: bool | None = None
    tool_errors: bool | None = None
    data_source: str = ""
    group: str = ""
    sample: int | None = None  # one dataset row (extra_info.index): the per-prompt learning page links here

    def apply(self, trajectories: QuerySet[Trajectory]) -> QuerySet[Trajectory]:
        conditions = Q()
        for lookup, value in (
            ("training_step", self.step), ("training_step__gte", self.step_min),
            ("training_step__lte", self.step_max), ("total_reward__gte", self.reward_min),
            ("total_reward__lte", self.reward_max), ("success", self.success), ("sample_index", self.sample),
        ):  # fmt: skip
            if value is not None:
                conditions &= Q(**{lookup: value})
        if self.tool_errors is not None:
            conditions &= Q(num_tool_errors__gt=0) if self.tool_errors else Q(num_tool_errors=0)
        if self.data_source:
            conditions &= Q(data_source=self.data_source)
        if self.group:
            conditions &= Q(group_id=self.group)
        return trajectories.filter(conditions)


def nearest_step_with_rollouts(run: Run, step: int) -> int | None:
    """The training step closest to ``step`` that has trajectories (ties go to the earlier one)."""
    base = Trajectory.objects.filter(run=run)
    before = (
        base.filter(training_step__lte=step)
        .order_by("-training_step")
        .values_list("training_step", flat=True)
    )
    after = (
        base.filter(training_step__gte=step).order_by("training_step").values_list("training_step", flat=True)
    )
    candidates = [s for s in (before.first(), after.first()) if s is not None]
    return min(candidates, key=lambda s: (abs(s - step), s)) if candidates else None


@dataclass
class StepView:
    step: TrajectoryStep
    prompt: str
    response: str
    prompt_kept: str  # the part of the prompt the previous step's prompt already had
    prompt_new: list[tuple[str, str]]  # (kind, text): kind is "same", "added" or "removed"
    response_parts: list[tuple[bool, str]]  # (is a tool call, text)
    calls: list[tuple[ToolCall, str]]  # each call with its result text


def step_views(trajectory: Trajectory) -> list[StepView]:
    steps = list(trajectory.steps.all())
    calls = list(trajectory.tool_calls.all())
    texts = TextBlob.texts_for([s.prompt_id for s in steps] + [s.response_id for s in steps] +
                               [c.result_id for c in calls])  # fmt: skip
    views: list[StepView] = []
    previous = ""
    for step in steps:
        prompt, response = texts.get(step.prompt_id, ""), texts.get(step.response_id, "")
        kept, new = prompt_change(previous, prompt)
        own = [c for c in calls if c.step_index == step.index]
        pairs = [(c, texts.get(c.result_id, "")) for c in own]
        views.append(StepView(step, prompt, response, kept, new, split_tool_calls(response), pairs))
        previous = prompt
    return views


def prompt_change(previous: str, prompt: str) -> tuple[str, list[tuple[str, str]]]:
    """What changed since the previous step's prompt: usually the history grows at the end, so the
    common prefix is folded away and only the new text shown; otherwise a line diff."""
    if previous and prompt.startswith(previous):
        return previous, [("added", prompt[len(previous) :])] if len(prompt) > len(previous) else []
    if not previous or len(previous) + len(prompt) > DIFF_MAX_CHARS:
        return "", [("added", prompt)]
    parts: list[tuple[str, str]] = []
    for line in difflib.ndiff(previous.splitlines(keepends=True), prompt.splitlines(keepends=True)):
        tag, text = line[:2], line[2:]
        kind = {"+ ": "added", "- ": "removed", "  ": "same"}.get(tag)
        if kind:
            parts.append((kind, text))
    return "", parts


_TOOL_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


def split_tool_calls(text: str) -> list[tuple[bool, str]]:
    """The response cut into plain text and tool-call spans (hermes ``<tool_call>`` tags), so the
    template can mark the calls while escaping every part like any other text."""
    parts: list[tuple[bool, str]] = []
    cursor = 0
    for match in _TOOL_CALL.finditer(text):
        if match.start() > cursor:
            parts.append((False, text[cursor : match.start()]))
        parts.append((True, match.group(0)))
        cursor = match.end()
    if cursor < len(text):
        parts.append((False, text[cursor:]))
    return parts


@dataclass
class GroupMember:
    trajectory: Trajectory
    advantage: float | None
    response: str


def group_members(run: Run, group_id: str) -> tuple[list[GroupMember], bool]:
    """The n rollouts of one prompt, and whether all their rewards are equal (zero advantage for
    group-relative estimators: the group teaches nothing)."""
    trajectories = list(
        Trajectory.objects.filter(run=run, group_id=group_id)
        .order_by("rollout_index", "id")
        .prefetch_related("steps")
    )
    last_steps = [list(t.steps.all())[-1:] for t in trajectories]
    texts = TextBlob.texts_for(s[0].response_id for s in last_steps if s)
    members = [
        GroupMember(t, _last_advantage(t), texts.get(s[0].response_id, "") if s else "")
        for t, s in zip(trajectories, last_steps, strict=True)
    ]
    rewards = {t.total_reward for t in trajectories}
    return members, len(trajectories) > 1 and len(rewards) == 1


def group_prompt(members: Sequence[GroupMember]) -> str:
    """The prompt the group's rollouts all start from: the first step of its first rollout."""
    for member in members:
        steps = list(member.trajectory.steps.all())
        if steps:
            return TextBlob.texts_for([steps[0].prompt_id]).get(steps[0].prompt_id, "")
    return ""


def first_prompts(run: Run, sample_indexes: Sequence[int]) -> dict[int, str]:
    """{dataset row: the prompt its first step saw}, from one trajectory per row (the earliest)."""
    if not sample_indexes:
        return {}
    rows = (
        TrajectoryStep.objects.filter(
            trajectory__run=run, trajectory__sample_index__in=list(sample_indexes), index=0
        )
        .order_by("trajectory__sample_index", "trajectory_id")
        .distinct("trajectory__sample_index")
        .values_list("trajectory__sample_index", "prompt_id")
    )
    pairs = list(rows)
    texts = TextBlob.texts_for(prompt for _row, prompt in pairs)
    return {row: texts.get(prompt, "") for row, prompt in pairs}


def _last_advantage(trajectory: Trajectory) -> float | None:
    for step in reversed(list(trajectory.steps.all())):
        if step.advantage is not None:
            return step.advantage
    return None


def data_sources(run: Run) -> list[str]:
    return list(
        Trajectory.objects.filter(run=run)
        .order_by("data_source")
        .values_list("data_source", flat=True)
        .distinct()
    )


def as_json(trajectory: Trajectory, *, with_steps: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": trajectory.uid, "group_id": trajectory.group_id, "sample_index": trajectory.sample_index,
        "rollout_index": trajectory.rollout_index, "training_step": trajectory.training_step,
        "data_source": trajectory.data_source, "total_reward": trajectory.total_reward,
        "success": trajectory.success, "num_steps": trajectory.num_steps,
        "num_tool_calls": trajectory.num_tool_calls, "num_tool_errors": trajectory.num_tool_errors,
        "response_tokens": trajectory.response_tokens, "metrics": trajectory.metrics,
    }  # fmt: skip
    if with_steps:
        data["ground_truth"] = trajectory.ground_truth
        data["steps"] = [
            {
                "index": v.step.index, "prompt_text": v.prompt, "response_text": v.response,
                "reward": v.step.reward, "advantage": v.step.advantage, "value": v.step.value,
                "done": v.step.done,
                "tool_calls": [
                    {"name": c.name, "arguments": c.arguments, "result": result, "error": c.error,
                     "latency_s": c.latency_s}
                    for c, result in v.calls
                ],
            }
            for v in step_views(trajectory)
        ]  # fmt: skip
    return data
