"""Trajectories in (one batch, one transaction) and the rollout viewer's queries out."""

from __future__ import annotations

import base64
import difflib
import json
import math
import re
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.postgres.search import SearchQuery
from django.db import connection, transaction
from django.db.models import F, Max, Q, QuerySet
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from ninja import Schema

from trainer.contract import (
    TOKEN_SIGNALS,
    StepSignalsWire,
    StepWire,
    TokenSignalsBatch,
    TokenSignalsWire,
    TrajectoryBatch,
    TrajectoryWire,
)
from webapp.experiments.models import Run
from webapp.ingestion import storage
from webapp.ingestion.models import (
    IngestBatch,
    PendingTokenSignals,
    TextBlob,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)
from webapp.retention import policy as retention
from webapp.retention.models import RetentionKind
from webapp.retention.policy import Retention

TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "rollout_log_probs")
SEARCH_CONFIG = "simple"  # no stemming, no stop words: tool names and identifiers are found as typed
SEARCH_DOC_MAX = 200_000  # characters of one step indexed (a tsvector holds at most 1 MB)
# Signals waiting for their trajectory are given up once the run has stored trajectories this many
# training steps newer: the trajectory was dropped by the run's retention policy, or its rollout
# worker died before reporting it.
PENDING_SIGNALS_STEPS = 8
# Above this many characters two prompts are not line-diffed (difflib is quadratic on long lines): the
# new prompt is shown whole instead.
DIFF_MAX_CHARS = 50_000


@dataclass
class StoreResult:
    duplicate_batch: bool = False
    stored: int = 0
    skipped: int = 0
    dropped: int = 0  # by the run's retention policy (docs/rollouts.md#retention)


@dataclass
class SignalsResult:
    duplicate_batch: bool = False
    stored: int = 0  # steps whose signals were written
    waiting: int = 0  # steps whose trajectory has not arrived yet (PendingTokenSignals)
    missing: int = 0  # steps a stored trajectory does not have (or not with as many tokens as sent)


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
    """Store the batch's trajectories with all their steps; ones already stored (by id) are skipped,
    ones the run's retention policy drops are counted and not written."""
    with transaction.atomic():
        if not IngestBatch.claim(run.pk, batch_id, "trajectories"):
            return StoreResult(duplicate_batch=True, skipped=len(batch.trajectories))
        counters = storage.storage_row(run)  # held to the end: the run's batches take turns
        uids = [t.id for t in batch.trajectories]
        known = set(Trajectory.objects.filter(run=run, uid__in=uids).values_list("uid", flat=True))
        fresh = _unique_by_id([t for t in batch.trajectories if t.id not in known])
        chosen = _retained(run, Retention.of(counters), batch.training_step, fresh)
        kept = {w.id for w in chosen}
        PendingTokenSignals.objects.filter(
            run=run, trajectory_uid__in=[w.id for w in fresh if w.id not in kept]
        ).delete()
        sizes = _store(run, batch.training_step, chosen) if chosen else storage.Sizes()
        storage.count_batch(counters, received=len(fresh), kept=len(chosen), sizes=sizes)
        return StoreResult(
            stored=len(chosen), skipped=len(batch.trajectories) - len(fresh), dropped=len(fresh) - len(chosen)
        )


def _retained(
    run: Run, policy: Retention, training_step: int, wires: list[TrajectoryWire]
) -> list[TrajectoryWire]:
    if policy.kind == RetentionKind.ALL or not wires:
        return wires
    successes = [success_of(w) for w in wires]
    stored = 0
    if policy.kind == RetentionKind.FAILURES:
        stored = Trajectory.objects.filter(run=run, training_step=training_step, success=True).count()
    keep = retention.kept(policy, [w.id for w in wires], successes, stored)
    return [w for w, kept in zip(wires, keep, strict=True) if kept]


def _unique_by_id(wires: Sequence[TrajectoryWire]) -> list[TrajectoryWire]:
    seen: dict[str, TrajectoryWire] = {}
    for wire in wires:
        seen.setdefault(wire.id, wire)
    return list(seen.values())


def _store(run: Run, training_step: int, wires: Sequence[TrajectoryWire]) -> storage.Sizes:
    texts = [s.prompt_text for w in wires for s in w.steps] + [
        s.response_text for w in wires for s in w.steps
    ]
    texts += [c.result for w in wires for s in w.steps for c in s.tool_calls]
    storage.hold_texts()
    hashes, new_texts = TextBlob.store_new(texts)
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
    _index_for_search(
        run.pk,
        [row.pk for row, wire in zip(rows, wires, strict=True) for _ in wire.steps],
        [step.index for wire in wires for step in wire.steps],
        [search_document(step) for wire in wires for step in wire.steps],
    )
    _write_pending_signals(run, {row.uid: row.pk for row in rows})
    return storage.batch_sizes(run.pk, [row.pk for row in rows], new_texts)


def store_token_signals(run: Run, batch: TokenSignalsBatch, batch_id: str) -> SignalsResult:
    """Add each step's per-token signals (and advantage) to the stored step. A step whose trajectory
    has not arrived yet, or whose tokens have not (signals sent without them), waits in
    PendingTokenSignals and is written when they do (docs/rollouts.md#token-signals)."""
    with transaction.atomic():
        if not IngestBatch.claim(run.pk, batch_id, "token_signals"):
            return SignalsResult(duplicate_batch=True)
        counters = storage.storage_row(run)  # the run's batches take turns, as in store_batch
        steps = _merged_by_step(batch.steps)
        uids = {s.trajectory_id for s in steps}
        pending = {
            (row.trajectory_uid, row.step_index): row
            for row in PendingTokenSignals.objects.filter(run=run, trajectory_uid__in=uids)
        }
        steps = [_after_waiting(pending.get(_step_key(s)), s) for s in steps]
        stored = dict(Trajectory.objects.filter(run=run, uid__in=uids).values_list("uid", "pk"))
        present = [(stored[s.trajectory_id], s) for s in steps if s.trajectory_id in stored]
        waiting = [s for s in steps if s.trajectory_id not in stored]
        written = _write_signals(run.pk, present)
        waiting += written.without_tokens
        storage.count_batch(
            counters, received=0, kept=0, sizes=storage.Sizes(token_signal_bytes=written.grown)
        )
        # What waited for these steps is in what was just written or waits again: forget the old rows.
        sent_keys, waiting_keys = {_step_key(s) for s in steps}, {_step_key(s) for s in waiting}
        done = [row.pk for key, row in pending.items() if key in sent_keys - waiting_keys]
        PendingTokenSignals.objects.filter(pk__in=done).delete()
        latest = Trajectory.objects.filter(run=run).aggregate(step=Max("training_step"))["step"] or 0
        PendingTokenSignals.objects.filter(run=run, training_step__lt=latest - PENDING_SIGNALS_STEPS).delete()
        _wait(run, waiting, latest)
        return SignalsResult(stored=written.steps, waiting=len(waiting), missing=written.missing)


def _step_key(step: StepSignalsWire) -> tuple[str, int]:
    return step.trajectory_id, step.step_index


def _after_waiting(waiting: PendingTokenSignals | None, step: StepSignalsWire) -> StepSignalsWire:
    """``step`` merged into what waited for that step, if anything did (it came first)."""
    if waiting is None:
        return step
    return merge_step_signals(StepSignalsWire.model_validate(waiting.payload), step)


def _merged_by_step(steps: Sequence[StepSignalsWire]) -> list[StepSignalsWire]:
    """One wire per step, a step sent twice merged in the order sent."""
    merged: dict[tuple[str, int], StepSignalsWire] = {}
    for step in steps:
        key = _step_key(step)
        merged[key] = merge_step_signals(merged[key], step) if key in merged else step
    return list(merged.values())


def merge_step_signals(earlier: StepSignalsWire, later: StepSignalsWire) -> StepSignalsWire:
    """Two sends of one step's signals as one: each signal and the advantage from the later send
    where it has them; the tokens too. Where the two do not fit (other token counts), the later alone."""
    first, second = earlier.token_signals, later.token_signals
    tokens = second.tokens if second.tokens is not None else first.tokens
    try:
        signals = TokenSignalsWire.model_validate(
            {"tokens": tokens, "signals": first.signals | second.signals}
        )
    except ValueError:
        signals = second
    advantage = later.advantage if later.advantage is not None else earlier.advantage
    return later.model_copy(update={"token_signals": signals, "advantage": advantage})


@dataclass
class _Written:
    steps: int = 0  # steps written
    grown: int = 0  # bytes of stored signals that added
    missing: int = 0  # steps the stored trajectories do not have (or not with as many tokens)
    without_tokens: list[StepSignalsWire] = field(default_factory=list)  # no tokens stored or sent yet


def _write_signals(run_id: int, steps: Sequence[tuple[int, StepSignalsWire]]) -> _Written:
    """Add the signals (and the advantage, when sent) of each (trajectory pk, step) to what the
    stored step has, in one read and one update."""
    if not steps:
        return _Written()
    table = TrajectoryStep._meta.db_table
    pairs = ([tid for tid, _ in steps], [step.step_index for _, step in steps])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT s.trajectory_id, s.index, s.token_signals FROM {table} s
            JOIN unnest(%s::bigint[], %s::int[]) AS v(tid, idx) ON s.trajectory_id = v.tid AND s.index = v.idx
            WHERE s.run_id = %s""",
            [*pairs, run_id],
        )
        existing = {(tid, idx): blob for tid, idx, blob in cursor.fetchall()}
    written, ready = _Written(), []
    for tid, step in steps:
        key = (tid, step.step_index)
        if key not in existing:
            written.missing += 1
            continue
        merged = _with_stored(existing[key], step)
        if merged.token_signals.tokens is not None:
            ready.append((tid, merged))
        elif existing[key] is None:
            written.without_tokens.append(merged)
        else:  # sent without tokens, and not one value per token the step has
            written.missing += 1
    if not ready:
        return written
    with connection.cursor() as cursor:
        # One statement for the batch; the old size is read in the same statement's FROM, before the update.
        cursor.execute(
            f"""UPDATE {table} AS s
            SET token_signals = v.blob, advantage = coalesce(v.adv, s.advantage)
            FROM unnest(%s::bigint[], %s::int[], %s::bytea[], %s::float8[]) AS v(tid, idx, blob, adv),
                 LATERAL (SELECT coalesce(pg_column_size(o.token_signals), 0) AS size FROM {table} o
                          WHERE o.run_id = %s AND o.trajectory_id = v.tid AND o.index = v.idx) AS old
            WHERE s.run_id = %s AND s.trajectory_id = v.tid AND s.index = v.idx
            RETURNING pg_column_size(s.token_signals) - old.size""",
            [
                [tid for tid, _ in ready],
                [step.step_index for _, step in ready],
                [pack_token_signals(step.token_signals) for _, step in ready],
                [step.advantage for _, step in ready],
                run_id,
                run_id,
            ],
        )
        grown = [int(row[0]) for row in cursor.fetchall()]
    written.steps, written.grown = len(grown), sum(grown)
    return written


def _with_stored(blob: bytes | None, step: StepSignalsWire) -> StepSignalsWire:
    """``step`` merged into the signals the stored step has (``blob``), if any."""
    if blob is None:
        return step
    stored = unpack_token_signals(bytes(blob))
    earlier = step.model_copy(
        update={"advantage": None, "token_signals": TokenSignalsWire.of(stored.tokens, stored.signals)}
    )
    return merge_step_signals(earlier, step)


def _wait(run: Run, steps: Sequence[StepSignalsWire], latest: int) -> None:
    """Keep these steps' signals until their trajectory (or tokens) arrive."""
    PendingTokenSignals.objects.bulk_create(
        [
            PendingTokenSignals(
                run=run,
                trajectory_uid=s.trajectory_id,
                step_index=s.step_index,
                training_step=latest,
                payload=s.model_dump(mode="json"),
            )
            for s in steps
        ],
        update_conflicts=True,
        unique_fields=["run", "trajectory_uid", "step_index"],
        update_fields=["training_step", "payload"],
    )


def _write_pending_signals(run: Run, trajectory_ids: dict[str, int]) -> None:
    """Write the signals that arrived before these just-stored trajectories, and forget them; those
    sent without tokens, with no tokens from another send, keep waiting for them."""
    pending = list(PendingTokenSignals.objects.filter(run=run, trajectory_uid__in=list(trajectory_ids)))
    if not pending:
        return
    steps = [StepSignalsWire.model_validate(row.payload) for row in pending]
    written = _write_signals(run.pk, [(trajectory_ids[s.trajectory_id], s) for s in steps])
    still = {_step_key(s) for s in written.without_tokens}
    done = [row.pk for row in pending if (row.trajectory_uid, row.step_index) not in still]
    PendingTokenSignals.objects.filter(pk__in=done).delete()


def search_document(step: StepWire) -> str:
    """What search finds a step by: its response, then each tool call's arguments and result."""
    parts = [step.response_text]
    for call in step.tool_calls:
        parts += [call.name, json.dumps(call.arguments, ensure_ascii=False), call.result]
    return "\n".join(parts)[:SEARCH_DOC_MAX]


def _index_for_search(
    run_id: int, trajectory_ids: list[int], indexes: list[int], documents: list[str]
) -> None:
    # One statement for the whole batch: Postgres builds each tsvector from the text it is handed.
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {TrajectoryStep._meta.db_table} AS s SET search = to_tsvector(%s, v.doc)
            FROM unnest(%s::bigint[], %s::int[], %s::text[]) AS v(tid, idx, doc)
            WHERE s.run_id = %s AND s.trajectory_id = v.tid AND s.index = v.idx""",
            [SEARCH_CONFIG, trajectory_ids, indexes, documents, run_id],
        )


# -- per-token signals (docs/rollouts.md#token-signals) ----------------------------------------------


def pack_token_signals(wire: TokenSignalsWire) -> bytes:
    """zlib of: a 4-byte header length, a JSON header (token texts, signal names), then each signal's
    float32 little-endian array as it came over the wire (4 bytes a token before compression)."""
    if wire.tokens is None:
        raise ValueError("token signals are stored with their tokens")
    names = [name for name in TOKEN_SIGNALS if name in wire.signals]
    header = json.dumps({"tokens": wire.tokens, "signals": names}, ensure_ascii=False).encode()
    arrays = b"".join(base64.b64decode(wire.signals[name]) for name in names)
    return zlib.compress(len(header).to_bytes(4, "little") + header + arrays, 6)


@dataclass
class TokenSignals:
    tokens: list[str]
    signals: dict[str, list[float]]


def unpack_token_signals(blob: bytes) -> TokenSignals:
    raw = zlib.decompress(blob)
    size = int.from_bytes(raw[:4], "little")
    header = json.loads(raw[4 : 4 + size])
    values = array("f")
    values.frombytes(raw[4 + size :])
    if sys.byteorder != "little":
        values.byteswap()
    n = len(header["tokens"])
    floats = values.tolist()
    signals = {name: floats[i * n : (i + 1) * n] for i, name in enumerate(header["signals"])}
    return TokenSignals(header["tokens"], signals)


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
        run_id=trajectory.run_id,
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
        token_signals=pack_token_signals(step.token_signals) if step.token_signals else None,
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
        return trajectories.filter(self.conditions())

    def conditions(self, prefix: str = "") -> Q:
        """The filters on a trajectory's fields; ``prefix`` (e.g. ``trajectory__``) reaches them from
        a related model in the same query."""
        found: dict[str, Any] = {}
        for lookup, value in (
            ("training_step", self.step), ("training_step__gte", self.step_min),
            ("training_step__lte", self.step_max), ("total_reward__gte", self.reward_min),
            ("total_reward__lte", self.reward_max), ("success", self.success), ("sample_index", self.sample),
        ):  # fmt: skip
            if value is not None:
                found[lookup] = value
        if self.tool_errors is not None:
            found["num_tool_errors__gt" if self.tool_errors else "num_tool_errors"] = 0
        if self.data_source:
            found["data_source"] = self.data_source
        if self.group:
            found["group_id"] = self.group
        return Q(**{prefix + lookup: value for lookup, value in found.items()})


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
    texts = TextBlob.texts_for([s.prompt_id for s in steps] + [s.response_id for s in steps] +
                               [c.result_id for c in calls])  # fmt: skip
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


# -- search (docs/rollouts.md#search) ---------------------------------------------------------------

SEARCH_RESULTS = 50
# ts_headline marks hits with these; the snippet is escaped, then they become <mark> (so nothing the
# model wrote is ever markup). Control characters no response keeps: they are stripped from it first.
_HIT_START, _HIT_STOP = "\x01", "\x02"


@dataclass
class SearchHit:
    trajectory: Trajectory
    run: Run  # its id and name only
    step_index: int
    snippet: SafeString


def search_query(text: str) -> SearchQuery:
    """Web-search syntax: words, "quoted phrases", or, -word."""
    return SearchQuery(text, config=SEARCH_CONFIG, search_type="websearch")


# The newest trajectories of a run searched first; a word in under 1% of them is looked up in the index.
SEARCH_WALK = 5000
_SEARCH_ORDER = ("-trajectory__training_step", "-trajectory_id", "index")


def _matching(text: str) -> QuerySet[TrajectoryStep]:
    return (
        TrajectoryStep.objects.filter(search=search_query(text))
        .select_related("trajectory")
        .defer(
            "tokens", "token_signals", "search", "info", "timings", "trajectory__metrics", "trajectory__info"
        )
    )


def search_newest(run_id: int, filters: RolloutFilter, text: str, limit: int) -> QuerySet[TrajectoryStep]:
    """The matches among the run's SEARCH_WALK newest trajectories within the filters (read newest
    first from the traj_run_step index), in the search's order."""
    newest = Trajectory.objects.filter(filters.conditions(), run_id=run_id).order_by("-training_step", "-id")
    return (
        _matching(text)
        .filter(trajectory__in=newest.values("pk")[:SEARCH_WALK])
        .order_by(*_SEARCH_ORDER)[:limit]
    )


def search_by_index(
    run_ids: Sequence[int], filters: RolloutFilter, text: str, limit: int
) -> QuerySet[TrajectoryStep]:
    """Every match from the step_search GIN index, joined to its trajectory, in the search's order.
    The order is on an expression (training_step + 0) so that the planner sorts the matches rather
    than walk the run's trajectories hoping to meet a rare word soon."""
    newest_first = (F("trajectory__training_step") + 0).desc()
    return (
        _matching(text)
        .filter(filters.conditions("trajectory__"), trajectory__run_id__in=list(run_ids))
        .order_by(newest_first, "-trajectory_id", "index")[:limit]
    )


def search_steps(
    run_ids: Sequence[int], filters: RolloutFilter, text: str, *, limit: int = SEARCH_RESULTS
) -> list[TrajectoryStep]:
    """Steps of the runs ``run_ids`` whose response, tool arguments or tool results match ``text``,
    newest training step first, within the rollout list's filters (docs/rollouts.md#search).

    A word in many steps is found among a run's newest trajectories: when those hold ``limit``
    matches they are the first ``limit`` of all. Otherwise the word is rare and its matches are few:
    the GIN index gives them all, then they are sorted."""
    if len(run_ids) == 1:
        found = list(search_newest(run_ids[0], filters, text, limit))
        if len(found) == limit:
            return found
    return list(search_by_index(run_ids, filters, text, limit))


def search_hits(run_ids: Sequence[int], filters: RolloutFilter, text: str) -> list[SearchHit]:
    steps = list(search_steps(run_ids, filters, text))
    calls = ToolCall.objects.filter(trajectory_id__in={s.trajectory_id for s in steps}).order_by(
        "trajectory_id", "step_index", "position"
    )
    texts = TextBlob.texts_for([s.response_id for s in steps] + [c.result_id for c in calls])
    by_step: dict[tuple[int, int], list[ToolCall]] = {}
    for call in calls:
        by_step.setdefault((call.trajectory_id, call.step_index), []).append(call)
    documents = []
    for step in steps:
        parts = [texts.get(step.response_id, "")]
        for call in by_step.get((step.trajectory_id, step.index), []):
            parts += [
                call.name,
                json.dumps(call.arguments, ensure_ascii=False),
                texts.get(call.result_id, ""),
            ]
        documents.append("\n".join(parts)[:SEARCH_DOC_MAX])
    snippets = headlines(documents, text)
    runs = Run.objects.only("name").in_bulk({s.trajectory.run_id for s in steps})  # a few, not one per hit
    return [
        SearchHit(s.trajectory, runs[s.trajectory.run_id], s.index, snippet)
        for s, snippet in zip(steps, snippets, strict=True)
    ]


def headlines(documents: list[str], text: str) -> list[SafeString]:
    """Postgres' ts_headline of each document: some 35 words around the first hits, escaped."""
    if not documents:
        return []
    cleaned = [d.replace(_HIT_START, " ").replace(_HIT_STOP, " ") for d in documents]
    options = f"StartSel={_HIT_START}, StopSel={_HIT_STOP}, MaxWords=35, MinWords=15"
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT ts_headline(%s, d.doc, websearch_to_tsquery(%s, %s), %s)
            FROM unnest(%s::text[]) WITH ORDINALITY AS d(doc, n) ORDER BY d.n""",
            [SEARCH_CONFIG, SEARCH_CONFIG, text, options, cleaned],
        )
        marked = [row[0] for row in cursor.fetchall()]
    return [
        mark_safe(
            escape(h).replace(_HIT_START, '<mark class="hit">').replace(_HIT_STOP, "</mark>")
        )  # escaped first
        for h in marked
    ]


# -- the same prompt at two training steps (docs/rollouts.md#same-prompt) --------------------------


def steps_of_prompt(run: Run, sample_index: int) -> list[int]:
    """The training steps that have rollouts of dataset row ``sample_index``."""
    return list(
        Trajectory.objects.filter(run=run, sample_index=sample_index)
        .order_by("training_step")
        .values_list("training_step", flat=True)
        .distinct()
    )


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
    path = list(trajectory.own_tool_calls().order_by("step_index", "position").values_list("name", flat=True))
    response = "\n".join(texts.get(s.response_id, "") for s in steps)
    advantage = next((s.advantage for s in reversed(steps) if s.advantage is not None), None)
    return RolloutSide(trajectory, response, advantage, path)


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
