"""The rollout viewer's queries: a run's trajectories filtered, one trajectory step by step (prompt
changes, tool calls, token signals), the n rollouts of one prompt (docs/rollouts.md)."""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from ninja import Field, Schema
from pydantic import field_validator

from webapp.experiments.models import Run
from webapp.ingestion.measures import MEASURES
from webapp.ingestion.models import (
    TextBlob,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)
from webapp.ingestion.token_signals import TokenSignals, unpack_token_signals
from webapp.rollouts.compare import DIFF_MAX_CHARS
from webapp.rollouts.labelling import label_condition
from webapp.rollouts.measures import value_range


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
    label: str = ""  # a label's name, "(any)" or "(none)" (docs/annotations.md#in-the-rollout-list)
    # A value range of one measure (a histogram's bin links here): measure_min <= value < measure_below.
    measure: str = Field("", description=f"One of {', '.join(MEASURES)}.")
    measure_min: float | None = None
    measure_below: float | None = None

    @field_validator("measure")
    @classmethod
    def _known_measure(cls, name: str) -> str:
        if name and name not in MEASURES:
            raise ValueError(f"not a measure; one of {', '.join(MEASURES)}")
        return name

    def apply(self, trajectories: QuerySet[Trajectory]) -> QuerySet[Trajectory]:
        return trajectories.filter(self.conditions())

    def conditions(self, prefix: str = "") -> Q:
        """The filters on a trajectory's fields; ``prefix`` (e.g. ``trajectory__``) reaches them from
        a related model in the same query."""
        found: dict[str, Any] = {}
        for lookup, value in (
            ("training_step", self.step),
            ("training_step__gte", self.step_min),
            ("training_step__lte", self.step_max),
            ("total_reward__gte", self.reward_min),
            ("total_reward__lte", self.reward_max),
            ("success", self.success),
            ("sample_index", self.sample),
        ):
            if value is not None:
                found[lookup] = value
        if self.tool_errors is not None:
            found["num_tool_errors__gt" if self.tool_errors else "num_tool_errors"] = 0
        if self.data_source:
            found["data_source"] = self.data_source
        if self.group:
            found["group_id"] = self.group
        chosen = Q(**{prefix + lookup: value for lookup, value in found.items()})
        if self.measure:
            chosen &= value_range(self.measure, self.measure_min, self.measure_below, prefix)
        if self.label:
            chosen &= label_condition(self.label, prefix)
        return chosen


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
    token_signals: TokenSignals | None = None

    @property
    def token_script_id(self) -> str:
        return f"tokens-{self.step.index}"

    @property
    def token_text(self) -> str:
        """The response as its tokens spell it (shown until the script colours it)."""
        return "".join(self.token_signals.tokens) if self.token_signals else ""

    @property
    def token_script(self) -> SafeString:
        """The token view's data as json_script writes it, {"tokens": [...], "signals": {name: [...]}},
        built in one pass: a 4,000-token response has 24,000 values."""
        if self.token_signals is None:
            return mark_safe("")
        signals = ",".join(
            f"{json.dumps(name)}:{_json_numbers(values)}"
            for name, values in self.token_signals.signals.items()
        )
        data = f'{{"tokens":{json.dumps(self.token_signals.tokens)},"signals":{{{signals}}}}}'
        return format_html(
            '<script id="{}" type="application/json">{}</script>',
            self.token_script_id,
            mark_safe(data.translate(_JSON_SCRIPT_ESCAPES)),
        )


# What django.utils.html.json_script escapes: the JSON can then never close its script element.
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}
_FOUR_DIGITS = "{:.4g}".format


def _json_numbers(values: list[float]) -> str:
    """A JSON array of ``values`` to four significant digits, plenty for a colour and a hover and
    small on the page; JSON has no NaN or Infinity, so those are null."""
    parts = list(map(_FOUR_DIGITS, values))
    if not all(map(math.isfinite, values)):
        parts = [part if math.isfinite(v) else "null" for part, v in zip(parts, values, strict=True)]
    return "[" + ",".join(parts) + "]"


def step_views(trajectory: Trajectory) -> list[StepView]:
    steps = list(
        trajectory.own_steps().defer("tokens", "search")
    )  # neither is shown; both grow with the response
    calls = list(trajectory.own_tool_calls())
    texts = TextBlob.texts_for(
        [s.prompt_id for s in steps] + [s.response_id for s in steps] + [c.result_id for c in calls]
    )
    views: list[StepView] = []
    previous = ""
    for step in steps:
        prompt, response = texts.get(step.prompt_id, ""), texts.get(step.response_id, "")
        kept, new = prompt_change(previous, prompt)
        own = [c for c in calls if c.step_index == step.index]
        pairs = [(c, texts.get(c.result_id, "")) for c in own]
        signals = unpack_token_signals(bytes(step.token_signals)) if step.token_signals else None
        views.append(StepView(step, prompt, response, kept, new, split_tool_calls(response), pairs, signals))
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
    for step in reversed(list(trajectory.own_steps())):
        if step.advantage is not None:
            return step.advantage
    return None


def data_sources(run: Run) -> list[str]:
    """The run's data sources in order: one probe of the traj_run_source index per source (a loose
    index scan), where DISTINCT would read every trajectory of the run."""
    table = Trajectory._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH RECURSIVE found(source) AS (
                (SELECT data_source FROM {table} WHERE run_id = %(run)s ORDER BY data_source LIMIT 1)
                UNION ALL
                SELECT (SELECT data_source FROM {table} WHERE run_id = %(run)s AND data_source > found.source
                        ORDER BY data_source LIMIT 1)
                FROM found WHERE found.source IS NOT NULL)
            SELECT source FROM found WHERE source IS NOT NULL""",
            {"run": run.pk},
        )
        return [row[0] for row in cursor.fetchall()]


def as_json(trajectory: Trajectory, *, with_steps: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": trajectory.uid,
        "group_id": trajectory.group_id,
        "sample_index": trajectory.sample_index,
        "rollout_index": trajectory.rollout_index,
        "training_step": trajectory.training_step,
        "data_source": trajectory.data_source,
        "total_reward": trajectory.total_reward,
        "success": trajectory.success,
        "num_steps": trajectory.num_steps,
        "num_tool_calls": trajectory.num_tool_calls,
        "num_tool_errors": trajectory.num_tool_errors,
        "response_tokens": trajectory.response_tokens,
        "metrics": trajectory.metrics,
    }
    if with_steps:
        data["ground_truth"] = trajectory.ground_truth
        data["steps"] = [
            {
                "index": v.step.index,
                "prompt_text": v.prompt,
                "response_text": v.response,
                "reward": v.step.reward,
                "advantage": v.step.advantage,
                "value": v.step.value,
                "done": v.step.done,
                "tool_calls": [
                    {
                        "name": c.name,
                        "arguments": c.arguments,
                        "result": result,
                        "error": c.error,
                        "latency_s": c.latency_s,
                    }
                    for c, result in v.calls
                ],
            }
            for v in step_views(trajectory)
        ]
    return data
