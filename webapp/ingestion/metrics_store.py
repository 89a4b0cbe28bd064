"""Metric points in and curves out, in SQL.

Writing a batch (one transaction, all or nothing):

1. the batch id goes into ``results_ingestbatch``; when it is already there the batch is a replay
   and nothing else happens;
2. the points are validated against the trainer's :class:`trainer.contract.MetricPoint` schema (a
   TypedDict derived from it: same fields, same constraints, no model object per point) and a
   bad point rejects the batch with a message naming it;
3. a point logged under one of verl's keys gets a twin under ours (``trainer.contract``'s alias
   table), so everything downstream reads our keys only; the original stays, so an MLflow client
   reads back what it logged;
4. the points go with one binary COPY into a temporary stage table, and one statement moves those
   not stored before (points from another batch for the same run/key/step, e.g. a trainer
   restarted from a checkpoint, are skipped: ``ON CONFLICT DO NOTHING``) into the point table and
   folds exactly those into the min/max summaries and the latest-value table.

Reading a curve: :func:`downsample` answers with at most ~1,000 points per series, each the
minimum or the maximum of its bucket, from the summaries when the range is wide and from the raw
points when zoomed in.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, cast

import numpy as np
import orjson
from django.db import connection, transaction
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from trainer.backends import canonical_key
from trainer.contract import PERF_GENERATED_TOKENS, BatchId, MetricPoint
from webapp.ingestion.models import SUMMARY_WIDTHS, IngestBatch, MetricKey

# Display buckets per series; each gives its minimum and maximum, so at most 2x this many points.
TARGET_BUCKETS = 490


class BadBatch(ValueError):
    """The batch breaks the schema; the message names the first bad point."""


def _point_dict_type() -> Any:
    """A TypedDict with MetricPoint's fields and constraints: validating into dicts is ~4x faster
    than building a model object per point, which matters at 10,000 points per request."""
    fields = {
        name: Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        for name, info in MetricPoint.model_fields.items()
    }
    point = TypedDict("MetricPointDict", fields)  # type: ignore[misc]
    point.__pydantic_config__ = MetricPoint.model_config  # type: ignore[attr-defined]
    return point


MetricPointDict = _point_dict_type()


class MetricBatchDict(TypedDict):
    batch_id: NotRequired[BatchId]
    points: list[MetricPointDict]  # type: ignore[valid-type]


MetricBatchDict.__pydantic_config__ = MetricPoint.model_config  # type: ignore[attr-defined]
_BATCH = TypeAdapter(MetricBatchDict)


def parse_batch(body: bytes) -> tuple[str | None, list[dict[str, Any]]]:
    """(batch_id, points) of a MetricBatch JSON body; BadBatch names the first bad point."""
    try:
        batch = _BATCH.validate_json(body)
    except ValidationError as error:
        raise BadBatch(_describe(error, body)) from None
    points = cast(list[dict[str, Any]], batch["points"])
    _check_ranges(points)
    return batch.get("batch_id"), points


def _describe(error: ValidationError, body: bytes) -> str:
    first = error.errors(include_url=False)[0]
    loc = first["loc"]
    if len(loc) >= 2 and loc[0] == "points" and isinstance(loc[1], int):
        return f"{_name_point(body, loc[1])}: {'.'.join(map(str, loc[2:])) or 'point'}: {first['msg']}"
    return f"{'.'.join(map(str, loc)) or 'body'}: {first['msg']}"


def _name_point(body: bytes, index: int) -> str:
    try:
        point = orjson.loads(body)["points"][index]
        return f"point {index} (key {point.get('key')!r}, step {point.get('step')!r})"
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        return f"point {index}"


def _check_ranges(points: list[dict[str, Any]]) -> None:
    """What the wire schema allows but the table cannot hold: non-finite times."""
    for index, point in enumerate(points):
        if not math.isfinite(point["ts"]):
            raise BadBatch(_bad(index, point, "ts must be a finite Unix time"))


def _bad(index: int, point: dict[str, Any], why: str) -> str:
    return f"point {index} (key {point['key']!r}, step {point['step']}): {why}"


# -- keys -------------------------------------------------------------------------------------------

_key_cache: dict[str, int] = {}


def key_ids(names: Iterable[str]) -> dict[str, int]:
    """Ids of metric keys, created when new. Cached per process: a key's id never changes."""
    wanted = set(names)
    missing = [name for name in wanted if name not in _key_cache]
    if missing:
        # Two batches introducing the same key race to insert it; the loser's insert is ignored.
        MetricKey.objects.bulk_create([MetricKey(name=n) for n in missing], ignore_conflicts=True)
        _key_cache.update(MetricKey.objects.filter(name__in=missing).values_list("name", "id"))
    return {name: _key_cache[name] for name in wanted}


def known_key_id(name: str) -> int | None:
    """The id of an existing key (None when no run ever logged it); never creates one."""
    if name not in _key_cache:
        found = MetricKey.objects.filter(name=name).values_list("id", flat=True).first()
        if found is None:
            return None
        _key_cache[name] = found
    return _key_cache[name]


def _totalled() -> list[int]:
    return list(key_ids(TOTALLED).values())


def forget_cached_keys() -> None:
    """Tests that flush the database call this so ids of deleted keys are not reused."""
    _key_cache.clear()


# -- writing ------------------------------------------------------------------------------------------


@dataclass
class Columns:
    key: np.ndarray
    step: np.ndarray
    value: np.ndarray
    ts: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


def columns(points: Sequence[dict[str, Any]]) -> Columns:
    ids = key_ids(p["key"] for p in points)
    count = len(points)
    return Columns(
        key=np.fromiter((ids[p["key"]] for p in points), np.int32, count),
        step=np.fromiter((p["step"] for p in points), np.int32, count),
        value=np.fromiter((p["value"] for p in points), np.float64, count),
        ts=np.fromiter((p["ts"] for p in points), np.float64, count),
    )


_COPY_ROW = np.dtype(
    [
        ("n", ">i2"),
        ("l1", ">i4"),
        ("run", ">i8"),
        ("l2", ">i4"),
        ("key", ">i4"),
        ("l3", ">i4"),
        ("step", ">i4"),
        ("l4", ">i4"),
        ("value", ">f8"),
        ("l5", ">i4"),
        ("ts", ">f8"),
    ]
)
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)


def copy_payload(run_id: int, cols: Columns) -> bytes:
    """The rows in Postgres' binary COPY format, built column-wise (no Python loop per row)."""
    rows = np.empty(len(cols), dtype=_COPY_ROW)
    rows["n"], rows["l1"], rows["l2"], rows["l3"], rows["l4"], rows["l5"] = 5, 8, 4, 4, 8, 8
    rows["run"], rows["key"], rows["step"], rows["value"], rows["ts"] = (
        run_id,
        cols.key,
        cols.step,
        cols.value,
        cols.ts,
    )
    return _COPY_HEADER + rows.tobytes() + _COPY_TRAILER


@dataclass
class WriteResult:
    duplicate_batch: bool = False
    stored: int = 0
    skipped: int = 0
    keys: list[str] = field(default_factory=list)


def with_our_keys(points: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
    """The points, and a copy under our key of each point logged under one of verl's."""
    ours = {key: canonical_key(key) for key in {p["key"] for p in points}}
    if not any(ours.values()):
        return points
    return [*points, *({**p, "key": ours[p["key"]]} for p in points if ours[p["key"]])]


def hold_run(run_id: int) -> None:
    """The weakest row lock on the run, for the rest of the transaction: only a resume's FOR UPDATE
    waits for it (or it for the resume), so a batch is never stored while a resume deletes and rebuilds
    what came after its checkpoint (docs/resume.md#superseded)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM experiments_run WHERE id = %s FOR KEY SHARE", [run_id])


def write_points(run_id: int, batch_id: str, points: Sequence[dict[str, Any]]) -> WriteResult:
    """Store a validated batch atomically; a replayed batch id changes nothing. Inside a caller's
    transaction it joins it (no savepoint: the batch is all or nothing with the caller's work)."""
    with transaction.atomic(savepoint=False):
        if not IngestBatch.claim(run_id, batch_id, "metrics"):
            return WriteResult(duplicate_batch=True, skipped=len(points))
        if not points:
            return WriteResult()
        points = with_our_keys(points)
        cols = columns(points)
        hold_run(run_id)
        with connection.cursor() as cursor:
            _stage(cursor, copy_payload(run_id, cols))
            cursor.execute(
                _STORE_STAGED,
                {"run": run_id, "levels": LEVELS, "widths": list(SUMMARY_WIDTHS), "totalled": _totalled()},
            )
            (stored,) = cursor.fetchone()
        return WriteResult(stored=stored, skipped=len(cols) - stored, keys=sorted({p["key"] for p in points}))


# The batch's rows go to a temporary table first (one per database connection), so that one
# statement can store the new ones and fold exactly those into the summaries and latest values: a few
# round trips a batch whatever it holds (docs/reliability.md#ingestion-under-many-trainers). The table
# is made if missing and emptied before each batch, in one round trip: two batches in one transaction
# must not see each other's rows, and a rolled-back transaction takes a table it made with it.
_STAGE_TABLE = "results_metric_stage"
_PREPARE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE_TABLE} "
    "(run_id bigint, key_id int, step int, value float8, ts float8) ON COMMIT DELETE ROWS; "
    f"TRUNCATE {_STAGE_TABLE}"
)
LEVELS = list(range(1, len(SUMMARY_WIDTHS) + 1))


def _stage(cursor: Any, payload: bytes) -> None:
    cursor.execute(_PREPARE_STAGE)
    with cursor.cursor.copy(f"COPY {_STAGE_TABLE} FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(payload)


# The keys whose running total is kept beside their latest value: counts a page sums over every step
# (docs/runs-and-curves.md#compare-runs). Counts are whole numbers, so their total is exact whatever
# the order the points arrived in, and a rebuild finds the same.
TOTALLED = (PERF_GENERATED_TOKENS,)
# A totalled key's total over the rows at hand (NULL without a value to add): NaN and +Infinity left out.
_TOTAL = (
    "sum(value) FILTER (WHERE value < 'Infinity' AND key_id = ANY(%(totalled)s)) OVER (PARTITION BY key_id)"
)
_NEWER = "EXCLUDED.step >= results_metriclatest.step"

# ``new``: the staged points not stored before. DISTINCT ON: a batch may repeat a (key, step); the
# first one logged (the lowest ctid in the freshly emptied stage) wins, as a replay would.
# The summaries: per level, key and bucket, n and the minimum and maximum with their step and time,
# ties to the smallest step so the result does not depend on the order points arrived in, non-finite
# values left out (a chart cannot draw them). Rows go in sorted by (level, key, bucket): two batches
# of one run touching the same buckets lock them in the same order, so their upserts wait for each
# other instead of deadlocking. Latest values: batches arrive out of order after a retry; the CASEs
# keep the highest step, while the total adds every new point.
_STORE_STAGED = f"""
WITH new AS (
    INSERT INTO results_metricpoint (run_id, key_id, step, value, ts)
    SELECT DISTINCT ON (key_id, step) %(run)s, key_id, step, value, ts FROM {_STAGE_TABLE}
    ORDER BY key_id, step, ctid
    ON CONFLICT DO NOTHING RETURNING key_id, step, value, ts
), summary AS (
    INSERT INTO results_metricsummary
        (run_id, key_id, level, bucket, n, min_value, min_step, min_ts, max_value, max_step, max_ts)
    SELECT %(run)s, key_id, level, bucket, n, lo[1], lo[2]::int, lo[3], hi[1], (-hi[2])::int, hi[3]
    FROM (
        SELECT key_id, w.level, step / w.width AS bucket, count(*) AS n,
               min(ARRAY[value, step, ts]) AS lo, max(ARRAY[value, -step, ts]) AS hi
        FROM new CROSS JOIN unnest(%(levels)s::int[], %(widths)s::int[]) AS w(level, width)
        WHERE value > '-Infinity' AND value < 'Infinity'
        GROUP BY key_id, w.level, bucket
    ) AS b
    ORDER BY level, key_id, bucket
    ON CONFLICT (run_id, key_id, level, bucket) DO UPDATE SET
        n = results_metricsummary.n + EXCLUDED.n,
        min_value = CASE WHEN (EXCLUDED.min_value, EXCLUDED.min_step) < (results_metricsummary.min_value,
            results_metricsummary.min_step) THEN EXCLUDED.min_value ELSE results_metricsummary.min_value END,
        min_step = CASE WHEN (EXCLUDED.min_value, EXCLUDED.min_step) < (results_metricsummary.min_value,
            results_metricsummary.min_step) THEN EXCLUDED.min_step ELSE results_metricsummary.min_step END,
        min_ts = CASE WHEN (EXCLUDED.min_value, EXCLUDED.min_step) < (results_metricsummary.min_value,
            results_metricsummary.min_step) THEN EXCLUDED.min_ts ELSE results_metricsummary.min_ts END,
        max_value = CASE WHEN (EXCLUDED.max_value, -EXCLUDED.max_step) > (results_metricsummary.max_value,
            -results_metricsummary.max_step) THEN EXCLUDED.max_value ELSE results_metricsummary.max_value END,
        max_step = CASE WHEN (EXCLUDED.max_value, -EXCLUDED.max_step) > (results_metricsummary.max_value,
            -results_metricsummary.max_step) THEN EXCLUDED.max_step ELSE results_metricsummary.max_step END,
        max_ts = CASE WHEN (EXCLUDED.max_value, -EXCLUDED.max_step) > (results_metricsummary.max_value,
            -results_metricsummary.max_step) THEN EXCLUDED.max_ts ELSE results_metricsummary.max_ts END
), latest AS (
    INSERT INTO results_metriclatest (run_id, key_id, step, value, ts, total)
    SELECT DISTINCT ON (key_id) %(run)s, key_id, step, value, ts, {_TOTAL} FROM new ORDER BY key_id, step DESC
    ON CONFLICT (run_id, key_id) DO UPDATE SET
        step = CASE WHEN {_NEWER} THEN EXCLUDED.step ELSE results_metriclatest.step END,
        value = CASE WHEN {_NEWER} THEN EXCLUDED.value ELSE results_metriclatest.value END,
        ts = CASE WHEN {_NEWER} THEN EXCLUDED.ts ELSE results_metriclatest.ts END,
        total = coalesce(results_metriclatest.total + EXCLUDED.total, results_metriclatest.total, EXCLUDED.total)
)
SELECT count(*) FROM new
"""


def rebuild_summaries(run_id: int) -> None:
    """Recompute a run's summaries, latest values and totals from its points (data loaded with plain
    SQL, or points a resume deleted)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM results_metricsummary WHERE run_id = %s", [run_id])
        cursor.execute("DELETE FROM results_metriclatest WHERE run_id = %s", [run_id])
        for level, width in enumerate(SUMMARY_WIDTHS, start=1):
            cursor.execute(
                """
                INSERT INTO results_metricsummary
                    (run_id, key_id, level, bucket, n, min_value, min_step, min_ts, max_value, max_step, max_ts)
                SELECT run_id, key_id, %(level)s, bucket, n, lo[1], lo[2]::int, lo[3], hi[1], (-hi[2])::int, hi[3]
                FROM (
                    SELECT run_id, key_id, step / %(width)s AS bucket, count(*) AS n,
                           min(ARRAY[value, step, ts]) AS lo, max(ARRAY[value, -step, ts]) AS hi
                    FROM results_metricpoint
                    WHERE run_id = %(run)s AND value > '-Infinity' AND value < 'Infinity'
                    GROUP BY run_id, key_id, bucket
                ) AS b
                """,
                {"level": level, "width": width, "run": run_id},
            )
        cursor.execute(
            "INSERT INTO results_metriclatest (run_id, key_id, step, value, ts, total) "
            f"SELECT DISTINCT ON (key_id) run_id, key_id, step, value, ts, {_TOTAL} FROM results_metricpoint "
            "WHERE run_id = %(run)s ORDER BY key_id, step DESC",
            {"run": run_id, "totalled": _totalled()},
        )


# -- reading ------------------------------------------------------------------------------------------


@dataclass
class Series:
    run_id: int
    key: str
    step: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    source: str = "raw"  # or "summary level N"

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "key": self.key,
            "step": self.step,
            "value": self.value,
            "ts": self.ts,
            "source": self.source,
        }


def step_range(run_id: int, key_id: int) -> tuple[int, int] | None:
    with connection.cursor() as cursor:
        # Two probes of the primary key index, not a scan.
        cursor.execute(
            "SELECT (SELECT step FROM results_metricpoint WHERE run_id = %(r)s AND key_id = %(k)s "
            "        ORDER BY step LIMIT 1), "
            "       (SELECT step FROM results_metricpoint WHERE run_id = %(r)s AND key_id = %(k)s "
            "        ORDER BY step DESC LIMIT 1)",
            {"r": run_id, "k": key_id},
        )
        lo, hi = cursor.fetchone()
    return None if lo is None else (int(lo), int(hi))


def plan(lo: int, hi: int) -> tuple[int, int]:
    """(level, display bucket width in steps); level 0 reads raw points."""
    need = max(1, math.ceil((hi - lo + 1) / TARGET_BUCKETS))
    level = 0
    for index, width in enumerate(SUMMARY_WIDTHS, start=1):
        if width <= need:
            level = index
    if level == 0:
        return 0, need
    width = SUMMARY_WIDTHS[level - 1]
    return level, math.ceil(need / width) * width


_RAW_SQL = """
SELECT (step - %(lo)s) / %(w)s AS d, min(ARRAY[value, step, ts]), max(ARRAY[value, -step, ts])
FROM results_metricpoint
WHERE run_id = %(run)s AND key_id = %(key)s AND step BETWEEN %(lo)s AND %(hi)s
  AND value > '-Infinity' AND value < 'Infinity'
GROUP BY d ORDER BY d
"""

_SUMMARY_SQL = """
SELECT (bucket - %(b0)s) / %(per)s AS d, min(ARRAY[min_value, min_step, min_ts]),
       max(ARRAY[max_value, -max_step, max_ts])
FROM results_metricsummary
WHERE run_id = %(run)s AND key_id = %(key)s AND level = %(level)s AND bucket BETWEEN %(b0)s AND %(b1)s
GROUP BY d ORDER BY d
"""


def downsample(run_id: int, key: str, lo: int | None = None, hi: int | None = None) -> Series:
    """At most 2 x TARGET_BUCKETS points of one series: each bucket's minimum and maximum."""
    series = Series(run_id, key)
    key_id = known_key_id(key)
    if key_id is None:
        return series
    bounds = step_range(run_id, key_id)
    if bounds is None:
        return series
    lo = bounds[0] if lo is None else max(lo, bounds[0])
    hi = bounds[1] if hi is None else min(hi, bounds[1])
    if hi < lo:
        return series
    level, width = plan(lo, hi)
    with connection.cursor() as cursor:
        if level == 0:
            cursor.execute(_RAW_SQL, {"run": run_id, "key": key_id, "lo": lo, "hi": hi, "w": width})
        else:
            summary_width = SUMMARY_WIDTHS[level - 1]
            b0, b1 = lo // summary_width, hi // summary_width
            params = {
                "run": run_id,
                "key": key_id,
                "level": level,
                "b0": b0,
                "b1": b1,
                "per": width // summary_width,
            }
            cursor.execute(_SUMMARY_SQL, params)
            series.source = f"summary level {level} ({summary_width} steps)"
        rows = cursor.fetchall()
    for _bucket, low, high in rows:
        _append_extremes(series, low, high)
    return series


def _append_extremes(series: Series, low: list[float], high: list[float]) -> None:
    points = {(int(low[1]), low[0], low[2]), (int(-high[1]), high[0], high[2])}
    for step, value, ts in sorted(points):
        series.step.append(step)
        series.value.append(value)
        series.ts.append(ts)


def latest_values(run_id: int) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of a run's latest points."""
    return {key: (step, value) for key, value, _ts, step in latest_points([run_id]).get(run_id, [])}


def latest_points(run_ids: Sequence[int]) -> dict[int, list[tuple[str, float, float, int]]]:
    """{run id: [(key, value, ts, step)]} of the runs' latest points, in key order."""
    if not run_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.run_id, k.name, l.value, l.ts, l.step FROM results_metriclatest l "
            "JOIN results_metrickey k ON k.id = l.key_id WHERE l.run_id = ANY(%s) ORDER BY k.name",
            [list(run_ids)],
        )
        rows = cursor.fetchall()
    latest: dict[int, list[tuple[str, float, float, int]]] = {}
    for run_id, key, value, ts, step in rows:
        latest.setdefault(run_id, []).append((key, value, ts, step))
    return latest


def raw_points(
    run_id: int, key: str, lo: int, hi: int, limit: int = 10_000
) -> list[tuple[int, float, float]]:
    """Every point of one series in a step window, for exports and zoomed API reads."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.step, p.value, p.ts FROM results_metricpoint p JOIN results_metrickey k ON k.id = p.key_id "
            "WHERE p.run_id = %s AND k.name = %s AND p.step BETWEEN %s AND %s ORDER BY p.step LIMIT %s",
            [run_id, key, lo, hi, limit],
        )
        return [(int(s), float(v), float(t)) for s, v, t in cursor.fetchall()]
