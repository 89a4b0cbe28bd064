"""Trajectories in: one batch in one transaction, each with its steps, tool calls and texts, as the
run's retention policy keeps them (docs/rollouts.md#retention), indexed for search."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from trainer.contract import (
    StepWire,
    TrajectoryBatch,
    TrajectoryWire,
)
from webapp.experiments.models import Run
from webapp.ingestion import step_values, storage
from webapp.ingestion.metrics_store import hold_run
from webapp.ingestion.models import (
    IngestBatch,
    PendingTokenSignals,
    TextBlob,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)
from webapp.ingestion.token_signals import pack_token_signals, write_pending_signals
from webapp.retention import accounting
from webapp.retention import policy as retention
from webapp.retention.models import RetentionKind
from webapp.retention.policy import Retention

TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "rollout_log_probs")
SEARCH_CONFIG = "simple"  # no stemming, no stop words: tool names and identifiers are found as typed
SEARCH_DOC_MAX = 200_000  # characters of one step indexed (a tsvector holds at most 1 MB)


@dataclass
class StoreResult:
    duplicate_batch: bool = False
    stored: int = 0
    skipped: int = 0
    dropped: int = 0  # by the run's retention policy (docs/rollouts.md#retention)


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
        hold_run(run.pk)  # before any other lock: a resume takes the run first too
        counters = accounting.storage_row(run)  # held to the end: the run's batches take turns
        uids = [t.id for t in batch.trajectories]
        known = set(Trajectory.objects.filter(run=run, uid__in=uids).values_list("uid", flat=True))
        fresh = _unique_by_id([t for t in batch.trajectories if t.id not in known])
        chosen = _retained(run, Retention.of(counters), batch.training_step, fresh)
        kept = {w.id for w in chosen}
        PendingTokenSignals.objects.filter(
            run=run, trajectory_uid__in=[w.id for w in fresh if w.id not in kept]
        ).delete()
        sizes = _store(run, batch.training_step, chosen) if chosen else accounting.Sizes()
        accounting.count_batch(counters, received=len(fresh), kept=len(chosen), sizes=sizes)
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


def _store(run: Run, training_step: int, wires: Sequence[TrajectoryWire]) -> accounting.Sizes:
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
                    run_id=run.pk,
                    trajectory=row,
                    step_index=step.index,
                    position=position,
                    training_step=training_step,
                    name=call.name[:200],
                    arguments=call.arguments,
                    result_id=hashes[call.result],
                    error=call.error,
                    reward=call.reward,
                    latency_s=call.latency_s,
                    info=call.info,
                )
                for position, call in enumerate(step.tool_calls)
            )
    TrajectoryStep.objects.bulk_create(steps, batch_size=1000)
    ToolCall.objects.bulk_create(calls, batch_size=1000)
    step_values.refresh_steps(run.pk, [training_step])
    _index_for_search(
        run.pk,
        [row.pk for row, wire in zip(rows, wires, strict=True) for _ in wire.steps],
        [step.index for wire in wires for step in wire.steps],
        [search_document(step) for wire in wires for step in wire.steps],
    )
    write_pending_signals(run, {row.uid: row.pk for row in rows})
    return storage.batch_sizes(run.pk, [row.pk for row in rows], new_texts)


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
