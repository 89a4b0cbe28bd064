"""The same prompt at two training steps (docs/rollouts.md#same-prompt): the rollouts side by side,
with word and tool-path diffs."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainer.contract import INT4_MAX
from webapp.experiments.models import Run
from webapp.ingestion.models import (
    TextBlob,
    Trajectory,
)

# Above this many characters two prompts are not line-diffed (difflib is quadratic on long lines): the
# new prompt is shown whole instead.
DIFF_MAX_CHARS = 50_000


def steps_of_prompt(run: Run, sample_index: int) -> list[int]:
    """The training steps that have rollouts of dataset row ``sample_index``."""
    return list(
        Trajectory.objects.filter(run=run, sample_index=sample_index)
        .order_by("training_step")
        .values_list("training_step", flat=True)
        .distinct()
    )


SHARED_ROWS_SCANNED = 2_000  # the newest trajectories of each run looked at for rows in common
SHARED_ROWS_SHOWN = 50


def shared_rows(runs: Sequence[Run]) -> list[tuple[int, int]]:
    """(dataset row, how many of ``runs`` have rollouts of it) for the rows at least two of them
    rolled out among their newest trajectories, most shared first: the rows the compare page's
    "one prompt across these runs" can show (runs of other seeds sample other rows)."""
    counts: Counter[int] = Counter()
    for run in runs:
        newest = Trajectory.objects.filter(run=run).order_by("-training_step", "-id")[:SHARED_ROWS_SCANNED]
        counts.update(set(newest.values_list("sample_index", flat=True)))
    shared = sorted((-n, row) for row, n in counts.items() if n >= 2)
    return [(row, -n) for n, row in shared[:SHARED_ROWS_SHOWN]]


def two_steps(
    steps: Sequence[int],
    other_steps: Sequence[int],
    asked_a: int | None,
    asked_b: int | None,
    *,
    same_run: bool,
) -> tuple[int, int]:
    """The two steps to compare: those asked for when the row has rollouts there, else the earliest
    against the latest. Within one run never a step against itself (which would show no change at
    all): then the latest other step. The caller makes sure one run has two steps of the row."""
    a = asked_a if asked_a is not None and asked_a in steps else steps[0]
    b = asked_b if asked_b is not None and asked_b in other_steps else other_steps[-1]
    if same_run and a == b:
        b = [step for step in other_steps if step != a][-1]
    return a, b


def rollout_of_prompt(run: Run, sample_index: int, step: int, rollout_index: int) -> Trajectory | None:
    """Rollout ``rollout_index`` of the row at ``step`` (the first one when it has fewer)."""
    found = Trajectory.objects.filter(run=run, sample_index=sample_index, training_step=step).order_by(
        "rollout_index", "id"
    )
    return found.filter(rollout_index=rollout_index).first() or found.first()


@dataclass
class RolloutSide:
    trajectory: Trajectory
    response: str  # every step's response, in order
    advantage: float | None
    tool_path: list[str]  # the names of the tools it called, in order
    step_responses: list[str] = field(default_factory=list)  # each step's response
    step_tools: list[list[str]] = field(default_factory=list)  # the tools each step called


@dataclass
class RolloutComparison:
    before: RolloutSide
    after: RolloutSide
    diff: list[tuple[str, str]] | None  # (kind, text), kind "same", "added" or "removed"; None: too long
    tool_path: list[tuple[str, str]]  # (kind, tool name) from the earlier call path to the later one

    @property
    def reward_delta(self) -> float:
        return self.after.trajectory.total_reward - self.before.trajectory.total_reward

    @property
    def advantage_delta(self) -> float | None:
        if self.before.advantage is None or self.after.advantage is None:
            return None
        return self.after.advantage - self.before.advantage


def rollout_side(trajectory: Trajectory) -> RolloutSide:
    steps = list(trajectory.own_steps().defer("tokens", "token_signals", "search").order_by("index"))
    texts = TextBlob.texts_for(s.response_id for s in steps)
    calls = list(
        trajectory.own_tool_calls().order_by("step_index", "position").values_list("step_index", "name")
    )
    responses = [texts.get(s.response_id, "") for s in steps]
    advantage = next((s.advantage for s in reversed(steps) if s.advantage is not None), None)
    per_step = [[name for index, name in calls if index == s.index] for s in steps]
    return RolloutSide(
        trajectory, "\n".join(responses), advantage, [name for _i, name in calls], responses, per_step
    )


def compare_rollouts(before: Trajectory, after: Trajectory) -> RolloutComparison:
    a, b = rollout_side(before), rollout_side(after)
    return RolloutComparison(a, b, word_diff(a.response, b.response), sequence_diff(a.tool_path, b.tool_path))


_WORDS = re.compile(r"\S+|\s+")


def word_diff(before: str, after: str) -> list[tuple[str, str]] | None:
    """A word-level diff of two responses (None when they are too long to diff quickly)."""
    if len(before) + len(after) > DIFF_MAX_CHARS:
        return None
    return sequence_diff(_WORDS.findall(before), _WORDS.findall(after), joined=True)


def sequence_diff(
    before: Sequence[str], after: Sequence[str], *, joined: bool = False
) -> list[tuple[str, str]]:
    """(kind, item) from ``before`` to ``after`` by difflib's matching; ``joined`` merges each run of
    items into one text."""
    parts: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pieces: list[tuple[str, Sequence[str]]] = []
        if tag == "equal":
            pieces = [("same", before[i1:i2])]
        else:
            pieces = [("removed", before[i1:i2]), ("added", after[j1:j2])]
        for kind, items in pieces:
            if joined and items:
                parts.append((kind, "".join(items)))
            elif not joined:
                parts.extend((kind, item) for item in items)
    return parts


# -- three or more rollouts of one prompt --------------------------------------------------------

MAX_SIDES = 8  # as many as the runs the compare page sets side by side


@dataclass
class StepCell:
    response: str
    tools: list[str]
    diff: list[tuple[str, str]] | None  # against the first rollout's same step; None: the first, or too long


@dataclass
class AlignedStep:
    index: int
    cells: list[StepCell | None]  # one per rollout; None where that rollout took fewer steps


@dataclass
class ManyRollouts:
    """Rollouts of one prompt aligned step by step, each diffed against the first."""

    sides: list[RolloutSide]
    steps: list[AlignedStep]
    tool_paths: list[list[tuple[str, str]]]  # each one's tool path against the first one's

    @property
    def columns(self) -> list[tuple[RolloutSide, list[tuple[str, str]]]]:
        return list(zip(self.sides, self.tool_paths, strict=True))


def compare_many(trajectories: Sequence[Trajectory]) -> ManyRollouts:
    sides = [rollout_side(t) for t in trajectories]
    first = sides[0]
    longest = max(len(side.step_responses) for side in sides)
    steps = []
    for index in range(longest):
        cells: list[StepCell | None] = []
        for position, side in enumerate(sides):
            if index >= len(side.step_responses):
                cells.append(None)
                continue
            response = side.step_responses[index]
            against = first.step_responses[index] if index < len(first.step_responses) else ""
            diff = None if position == 0 else word_diff(against, response)
            cells.append(StepCell(response, side.step_tools[index], diff))
        steps.append(AlignedStep(index, cells))
    paths = [sequence_diff(first.tool_path, side.tool_path) for side in sides]
    return ManyRollouts(sides, steps, paths)


def parse_sides(values: Sequence[str], limit: int = MAX_SIDES - 2) -> list[tuple[int, int]]:
    """The first ``limit`` ``run:step`` pairs of a query (``also=12:40``), in order; anything else
    is left out."""
    found = []
    for value in values:
        run, _colon, step = value.partition(":")
        if run.isdigit() and step.isdigit() and int(run) <= INT4_MAX and int(step) <= INT4_MAX:
            found.append((int(run), int(step)))
    return found[:limit]
