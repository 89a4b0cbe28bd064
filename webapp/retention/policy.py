"""A run's retention policy: which of its trajectories are stored (docs/rollouts.md#retention).

Decided as a batch arrives (ingestion.trajectories.store_batch: what the policy drops is never
written) and again over what is stored when a member changes the policy
(ingestion.storage.apply_retention). Both decide alike: a sample by a hash of the trajectory's uid,
so a replayed batch is decided the same way; the k successes of a training step are the first k by
that hash. A policy only drops, never brings back.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webapp.retention.models import RetentionKind, RetentionSettings

MAX_KEEP_SUCCESSES = 1_000_000
HASH_RANGE = 2**32
# The SQL twin of uid_hash: the first 4 bytes of sha256(uid), big-endian, unsigned.
UID_HASH_SQL = "('x' || left(encode(sha256(convert_to({column}, 'UTF8')), 'hex'), 8))::bit(32)::bigint"


@dataclass(frozen=True)
class Retention:
    kind: str = RetentionKind.ALL
    keep_successes: int = 4
    sample_fraction: float = 0.1

    @classmethod
    def of(cls, settings: RetentionSettings) -> Retention:
        return cls(settings.retention, settings.keep_successes, settings.sample_fraction)

    def fields(self) -> dict[str, Any]:
        """As RetentionSettings' fields."""
        return {
            "retention": self.kind,
            "keep_successes": self.keep_successes,
            "sample_fraction": self.sample_fraction,
        }

    def problems(self) -> list[tuple[str, str]]:
        """(field, message) for values no policy takes."""
        found = []
        if self.kind not in RetentionKind.values:
            found.append(("retention", f"one of {', '.join(RetentionKind.values)}"))
        if not 0 <= self.keep_successes <= MAX_KEEP_SUCCESSES:
            found.append(("keep_successes", f"between 0 and {MAX_KEEP_SUCCESSES:,}"))
        if not (math.isfinite(self.sample_fraction) and 0 < self.sample_fraction <= 1):
            found.append(("sample_fraction", "a fraction above 0 and at most 1"))
        return found

    def describe(self) -> str:
        if self.kind == RetentionKind.FAILURES:
            plural = "es" if self.keep_successes != 1 else ""
            return f"all failures plus {self.keep_successes} success{plural} per training step"
        if self.kind == RetentionKind.SAMPLE:
            return f"a sample of {self.sample_fraction:.4g} of the trajectories (by a hash of their id)"
        return "everything"


def uid_hash(uid: str) -> int:
    return int.from_bytes(hashlib.sha256(uid.encode("utf-8")).digest()[:4], "big")


def sample_limit(fraction: float) -> int:
    """A uid is in the sample when its hash is below this."""
    return math.ceil(fraction * HASH_RANGE)


def kept(
    retention: Retention, uids: Sequence[str], successes: Sequence[bool], successes_stored: int
) -> list[bool]:
    """Which of one training step's arriving trajectories the policy stores, given how many
    successes of that step are stored already."""
    if retention.kind == RetentionKind.SAMPLE:
        limit = sample_limit(retention.sample_fraction)
        return [uid_hash(uid) < limit for uid in uids]
    if retention.kind == RetentionKind.FAILURES:
        room = max(retention.keep_successes - successes_stored, 0)
        ranked = sorted((uid_hash(uid), uid) for uid, success in zip(uids, successes, strict=True) if success)
        chosen = {uid for _hash, uid in ranked[:room]}
        return [not success or uid in chosen for uid, success in zip(uids, successes, strict=True)]
    return [True] * len(uids)


def dropped_sql(retention: Retention) -> tuple[str, dict[str, Any]] | None:
    """A query of the ids of a run's stored trajectories (``%(run)s``) the policy drops; None: none."""
    hashed = UID_HASH_SQL.format(column="uid")
    if retention.kind == RetentionKind.SAMPLE:
        return (
            f"SELECT id FROM results_trajectory WHERE run_id = %(run)s AND {hashed} >= %(limit)s",
            {"limit": sample_limit(retention.sample_fraction)},
        )
    if retention.kind == RetentionKind.FAILURES:
        return (
            f"""SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY training_step
                ORDER BY {hashed}, uid COLLATE "C") AS n FROM results_trajectory
                WHERE run_id = %(run)s AND success) AS ranked WHERE n > %(k)s""",
            {"k": retention.keep_successes},
        )
    return None
