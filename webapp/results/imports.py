"""Runs trained elsewhere, brought into the rollout viewer: Agent-R1's trajectory dumps and verl's
rollout dumps (``{rollout_data_dir}/{global_step}.jsonl``), plus an optional metrics file, become an
external run whose trajectories are stored exactly as a launched run's are (docs/imports.md).

Parsing is pure (lines in, wire models out); :func:`import_run` is the one call that writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from pydantic import ValidationError

from trainer.backends import canonical_key
from trainer.contract import (
    ID_MAX,
    INT4_MAX,
    METRIC_KEY_MAX,
    REWARD_MEAN,
    StepWire,
    ToolCallWire,
    TrajectoryBatch,
    TrajectoryWire,
)
from trainer.tools.formats import FORMATS
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import metrics_store
from webapp.ingestion import trajectories as rollouts

AGENT_R1 = "agent-r1"
VERL = "verl"
FORMAT_NAMES = (AGENT_R1, VERL)
# The fields of a verl dump line that are not extra reward values (docs/imports.md#verl).
VERL_FIELDS = frozenset({"input", "output", "gts", "score", "step", "uid", "request_id", "data_source"})
MAX_LINES = 200_000
_STEP_FILE = re.compile(r"(\d+)\.jsonl$")
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)


class DumpRefused(ValueError):
    """A dump that cannot be read: the message names the file and line."""


@dataclass
class Parsed:
    """What the files hold: trajectories per training step and metric points."""

    format: str = ""
    steps: dict[int, list[TrajectoryWire]] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def trajectories(self) -> int:
        return sum(len(wires) for wires in self.steps.values())


def step_of_filename(name: str) -> int | None:
    """The global step a dump's file name carries (``17.jsonl``), else None."""
    found = _STEP_FILE.search(name)
    return int(found[1]) if found and int(found[1]) <= INT4_MAX else None


def detect_format(record: dict[str, Any]) -> str:
    """Agent-R1 writes one line per trajectory with its ``steps``; verl one line per sample."""
    if isinstance(record.get("steps"), list) and ("trajectory_uid" in record or "num_steps" in record):
        return AGENT_R1
    if "input" in record and "output" in record:
        return VERL
    raise ValueError(
        "neither an Agent-R1 trajectory (trajectory_uid, steps) nor a verl sample (input, output)"
    )


def parse_dump(name: str, lines: Iterable[str | bytes], parsed: Parsed | None = None) -> Parsed:
    """Add one dump file's trajectories to ``parsed``; DumpRefused names the first bad line."""
    parsed = parsed or Parsed()
    file_step = step_of_filename(name)
    groups: dict[str, int] = {}
    counts: dict[str, int] = {}
    for number, record in _records(name, lines):
        try:
            kind = detect_format(record)
            if parsed.format and kind != parsed.format:
                raise ValueError(f"a {kind} line among {parsed.format} lines: import one format at a time")
            parsed.format = kind
            step = _training_step(record, file_step)
            group = _group_key(record)
            sample_index = groups.setdefault(group, len(groups))
            rollout_index = counts.get(group, 0)
            counts[group] = rollout_index + 1
            uid = _uid(record, kind, step, number)
            build = _agent_r1_trajectory if kind == AGENT_R1 else _verl_trajectory
            wire = build(record, uid, _cut_id(group), sample_index, rollout_index)
        except (ValueError, TypeError, ValidationError) as error:
            raise DumpRefused(f"{name} line {number}: {_short(error)}") from None
        parsed.steps.setdefault(step, []).append(wire)
    return parsed


def parse_metrics(name: str, lines: Iterable[str | bytes], parsed: Parsed) -> Parsed:
    """A metrics file: JSON lines of ``{"step": n, "data": {key: value}}`` (verl's file logger) or
    ``{"step": n, key: value, ...}``; numbers only (others are skipped), verl's keys kept as logged."""
    for number, record in _records(name, lines):
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= INT4_MAX:
            raise DumpRefused(f"{name} line {number}: step must be an integer from 0 to {INT4_MAX}")
        nested = record.get("data")
        values: dict[str, Any] = nested if isinstance(nested, dict) else record
        ts = float(record["ts"]) if _number(record.get("ts")) else 0.0
        for key, value in values.items():
            if key in ("step", "ts", "timestamp") or not _number(value):
                continue
            if not 0 < len(key) <= METRIC_KEY_MAX or "\x00" in key:
                continue
            parsed.points.append({"key": key, "step": step, "value": float(value), "ts": ts})
    return parsed


def parse_files(
    dumps: Iterable[Any], metrics: Any | None = None, progress: Callable[[int, int], None] | None = None
) -> Parsed:
    """Uploaded files (anything with ``name`` that iterates its lines): the dumps in step order,
    then the metrics file. ``progress(files read, files)`` after each dump."""
    parsed = Parsed()
    ordered = sorted(dumps, key=lambda f: step_of_filename(f.name or "") or 0)
    for number, dump in enumerate(ordered, start=1):
        parse_dump(dump.name or "dump.jsonl", dump, parsed)
        if progress is not None:
            progress(number, len(ordered))
    if metrics is not None:
        parse_metrics(metrics.name or "metrics.jsonl", metrics, parsed)
    return parsed


@dataclass(frozen=True)
class Imported:
    run: Run
    trajectories: int
    points: int
    steps: int


def import_run(team: Any, user: Any, experiment_name: str, run_name: str, parsed: Parsed) -> Imported:
    """One external run holding everything parsed; finished (succeeded) once stored, all or nothing."""
    if not parsed.steps and not parsed.points:
        raise DumpRefused("nothing to import: the files hold no trajectories and no metrics")
    with transaction.atomic():
        experiment, _ = Experiment.create_external(team, experiment_name, user)
        run = Run.create_external(experiment, run_name, None)
        for step in sorted(parsed.steps):
            wires = parsed.steps[step]
            for start in range(0, len(wires), 500):
                batch = TrajectoryBatch(training_step=step, trajectories=wires[start : start + 500])
                rollouts.store_batch(run, batch, f"import-{run.pk}-{step}-{start}")
        points = parsed.points + reward_means(parsed)
        if points:
            metrics_store.write_points(run.pk, f"import-{run.pk}-metrics", points)
        last = max([*parsed.steps, *(p["step"] for p in parsed.points)], default=0)
        Run.objects.filter(pk=run.pk).update(step=last, total_steps=last)
        run.finish(RunStatus.SUCCEEDED, f"imported from {parsed.format or 'a metrics file'}")
        run.refresh_from_db()
    return Imported(run, parsed.trajectories, len(parsed.points), len(parsed.steps))


def reward_means(parsed: Parsed) -> list[dict[str, Any]]:
    """reward/mean per step from the trajectories' rewards, when the metrics file gives none (under
    our key or verl's), so the run's reward curve and overview read like a launched run's."""
    if any(REWARD_MEAN in (p["key"], canonical_key(p["key"])) for p in parsed.points):
        return []
    return [
        {
            "key": REWARD_MEAN,
            "step": step,
            "value": sum(w.total_reward for w in wires) / len(wires),
            "ts": 0.0,
        }
        for step, wires in sorted(parsed.steps.items())
        if wires
    ]


# -- one line each ----------------------------------------------------------------------------------


def _records(name: str, lines: Iterable[str | bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, raw in enumerate(lines, start=1):
        if number > MAX_LINES:
            raise DumpRefused(f"{name}: more than {MAX_LINES} lines; import it in parts")
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise DumpRefused(f"{name} line {number}: not JSON ({_short(error)})") from None
        if not isinstance(record, dict):
            raise DumpRefused(f"{name} line {number}: a JSON object per line is expected")
        yield number, record


def _training_step(record: dict[str, Any], file_step: int | None) -> int:
    step = record.get("step", file_step)
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= INT4_MAX:
        raise ValueError(f"step must be an integer from 0 to {INT4_MAX} (or the file named N.jsonl)")
    return step


def _group_key(record: dict[str, Any]) -> str:
    """The prompt's group: the dump's ``uid`` when it has one (verl's per-prompt id), else the prompt
    text itself: the n rollouts of one prompt share it (docs/imports.md#groups)."""
    uid = record.get("uid")
    if isinstance(uid, str | int) and not isinstance(uid, bool) and str(uid):
        return str(uid)
    return "p-" + hashlib.sha256(_text(record.get("input")).encode()).hexdigest()[:16]


def _uid(record: dict[str, Any], kind: str, step: int, number: int) -> str:
    own = record.get("trajectory_uid") if kind == AGENT_R1 else record.get("request_id")
    if isinstance(own, str | int) and not isinstance(own, bool) and str(own):
        return _cut_id(str(own))
    return f"s{step}-l{number}"


def _agent_r1_trajectory(
    record: dict[str, Any], uid: str, group: str, sample_index: int, rollout_index: int
) -> TrajectoryWire:
    raw_steps = sorted(
        (s for s in record["steps"] if isinstance(s, dict)), key=lambda s: _int(s.get("step_index"), 0)
    )
    steps = []
    for position, raw in enumerate(raw_steps):
        following = raw_steps[position + 1] if position + 1 < len(raw_steps) else None
        steps.append(
            StepWire(
                index=_int(raw.get("step_index"), position),
                prompt_text=_text(raw.get("input")),
                response_text=_text(raw.get("output")),
                reward=_float_or_none(raw.get("score")),
                done=following is None,
                tool_calls=_tool_calls(raw, following),
                info={k: v for k, v in raw.items() if k not in ("step_index", "input", "output", "score")},
            )
        )
    score = _float_or_none(record.get("score"))
    return TrajectoryWire(
        id=uid, group_id=group, sample_index=sample_index, rollout_index=rollout_index,
        data_source=_text(record.get("data_source"))[:200], ground_truth=record.get("gts"),
        total_reward=score if score is not None else sum(s.reward or 0.0 for s in steps),
        metrics=_extra_numbers(record, {"trajectory_uid", "input", "output", "gts", "score", "step", "num_steps",
                                        "steps", "uid", "data_source"}),
        steps=steps,
    )  # fmt: skip


def _verl_trajectory(
    record: dict[str, Any], uid: str, group: str, sample_index: int, rollout_index: int
) -> TrajectoryWire:
    score = _float_or_none(record.get("score")) or 0.0
    step = StepWire(
        index=0, prompt_text=_text(record.get("input")), response_text=_text(record.get("output")),
        reward=score, done=True, tool_calls=_tool_calls(record, None),
    )  # fmt: skip
    return TrajectoryWire(
        id=uid, group_id=group, sample_index=sample_index, rollout_index=rollout_index,
        data_source=_text(record.get("data_source"))[:200], ground_truth=record.get("gts"),
        total_reward=score, metrics=_extra_numbers(record, VERL_FIELDS), steps=[step],
    )  # fmt: skip


def _tool_calls(step: dict[str, Any], following: dict[str, Any] | None) -> list[ToolCallWire]:
    """The hermes ``<tool_call>`` blocks of the step's output, with the results the next step's
    input carries back in ``<tool_response>`` blocks (the last ones, one per call)."""
    records = FORMATS.get("hermes").parse(_text(step.get("output")))
    if not records:
        return []
    results: list[str] = []
    if following is not None:
        later = _text(following.get("input"))
        before = _text(step.get("input")) + _text(step.get("output"))
        tail = later[len(before) :] if later.startswith(before) else later
        results = _TOOL_RESPONSE.findall(tail)[-len(records) :]
    calls = []
    for position, record in enumerate(records):
        result = results[position] if position < len(results) else ""
        calls.append(
            ToolCallWire(
                name=record.name or "(unnamed)", arguments=record.arguments, result=result,
                error=record.error or None,
            )
        )  # fmt: skip
    return calls


def _extra_numbers(record: dict[str, Any], known: Iterable[str]) -> dict[str, float]:
    """The line's other numeric values (verl's extra reward keys such as ``acc``) as metrics."""
    skip = set(known)
    return {
        key[:ID_MAX]: float(value)
        for key, value in record.items()
        if key not in skip and _number(value) and math.isfinite(float(value))
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _float_or_none(value: Any) -> float | None:
    return float(value) if _number(value) and math.isfinite(float(value)) else None


def _int(value: Any, default: int) -> int:
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT4_MAX
        else default
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text.replace("\x00", "")


def _cut_id(value: str) -> str:
    return value.replace("\x00", "")[:ID_MAX] or "-"


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:300]
