"""Per-token signals in (docs/rollouts.md#token-signals): added to steps already stored, or kept
waiting for their trajectory; and their packed form on a step."""

from __future__ import annotations

import base64
import json
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from trainer.contract import (
    TOKEN_SIGNALS,
    StepSignalsWire,
    TokenSignalsBatch,
    TokenSignalsWire,
)
from webapp.experiments.models import Run
from webapp.ingestion.models import (
    IngestBatch,
    PendingTokenSignals,
    Trajectory,
    TrajectoryStep,
)
from webapp.retention import accounting

# Signals waiting for their trajectory are given up once the run has stored trajectories this many
# training steps newer: the trajectory was dropped by the run's retention policy, or its rollout
# worker died before reporting it.
PENDING_SIGNALS_STEPS = 8
# ... or once they waited this long, whether or not anything else arrived (the run ended, or no
# other batch came): beat gives them up on its own schedule (give_up_waiting_signals).
PENDING_SIGNALS_GRACE = timedelta(hours=1)


@dataclass
class SignalsResult:
    duplicate_batch: bool = False
    stored: int = 0  # steps whose signals were written
    waiting: int = 0  # steps whose trajectory has not arrived yet (PendingTokenSignals)
    missing: int = 0  # steps a stored trajectory does not have (or not with as many tokens as sent)


def store_token_signals(run: Run, batch: TokenSignalsBatch, batch_id: str) -> SignalsResult:
    """Add each step's per-token signals (and advantage) to the stored step. A step whose trajectory
    has not arrived yet, or whose tokens have not (signals sent without them), waits in
    PendingTokenSignals and is written when they do (docs/rollouts.md#token-signals)."""
    with transaction.atomic():
        if not IngestBatch.claim(run.pk, batch_id, "token_signals"):
            return SignalsResult(duplicate_batch=True)
        counters = accounting.storage_row(run)  # the run's batches take turns, as in store_batch
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
        accounting.count_batch(
            counters, received=0, kept=0, sizes=accounting.Sizes(token_signal_bytes=written.grown)
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


def give_up_waiting_signals() -> int:
    """Forget the signals that waited for their trajectory longer than PENDING_SIGNALS_GRACE (beat's
    periodic task; docs/rollouts.md#token-signals); how many steps' signals went."""
    cutoff = timezone.now() - PENDING_SIGNALS_GRACE
    deleted, _ = PendingTokenSignals.objects.filter(received__lt=cutoff).delete()
    return deleted


def write_pending_signals(run: Run, trajectory_ids: dict[str, int]) -> None:
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
