"""Health checks as a run reports (docs/health.md#at-ingestion): each metric batch moves the windows
of the checks that watch its keys and records each check's verdict on the run.

A check that starts firing opens an *episode*: one :class:`HealthAlert` row (unique per run, check and
episode), the in-app notifications of the team's members, one delivery task for the webhook and the
email, and, where the team asked for it, a cancel of the run. A check that stops firing closes the
episode; firing again opens the next.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection, transaction

from webapp.accounts.models import Team
from webapp.experiments.models import Run
from webapp.monitoring import alerts
from webapp.monitoring.checks import (
    CHECKS,
    NON_FINITE_KEY,
    Context,
    HealthCheck,
    Point,
    all_checks,
    merge_window,
)
from webapp.monitoring.models import (
    AlertDelivery,
    DeliveryStatus,
    HealthAlert,
    HealthRule,
    Notification,
    RunHealth,
)
from webapp.monitoring.tasks import send_alert

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """A check as one team runs it."""

    check: HealthCheck
    enabled: bool
    threshold: float
    stop_run: bool


def team_rules(team_id: int) -> dict[str, Rule]:
    """Every check with the team's setting, the check's defaults where the team set nothing."""
    stored = {rule.check_name: rule for rule in HealthRule.objects.filter(team_id=team_id)}
    rules: dict[str, Rule] = {}
    for health_check in all_checks():
        row = stored.get(health_check.name)
        rules[health_check.name] = (
            Rule(health_check, row.enabled, row.threshold, row.stop_run)
            if row
            else Rule(health_check, True, health_check.threshold, False)
        )
    return rules


def save_rule(team: Team, name: str, *, enabled: bool, threshold: float, stop_run: bool) -> None:
    CHECKS.get(name)  # RegistryError for a name that is no check
    # Race: two owners saving at once; the unique constraint keeps one row and the last write wins.
    HealthRule.objects.update_or_create(
        team=team,
        check_name=name,
        defaults={"enabled": enabled, "threshold": threshold, "stop_run": stop_run},
    )


def series_of(points: Iterable[Mapping[str, Any]], keys: Container[str]) -> dict[str, list[Point]]:
    """A batch's points of these keys, by key in step order, with the derived count of non-finite
    values per step (of every key)."""
    series: dict[str, list[Point]] = defaultdict(list)
    non_finite: dict[int, int] = {}
    for point in points:
        step, value = point["step"], point["value"]
        if point["key"] in keys:
            series[point["key"]].append((step, value))
        non_finite[step] = non_finite.get(step, 0) + (not math.isfinite(value))
    for points_of_key in series.values():
        points_of_key.sort(key=lambda point: point[0])
    series[NON_FINITE_KEY] = sorted((step, float(count)) for step, count in non_finite.items())
    return series


def context_of(run: Run) -> Context:
    config = run.config if isinstance(run.config, dict) else {}
    data, rollout = config.get("data"), config.get("rollout")
    limit = data.get("max_response_length") if isinstance(data, dict) else None
    rollout = rollout if isinstance(rollout, dict) else {}
    warmup = rollout.get("tool_warmup_steps")
    return Context(
        max_response_length=limit if isinstance(limit, int) and limit > 0 else None,
        uses_tools=bool(rollout.get("tools")),
        tool_warmup_steps=warmup if isinstance(warmup, int) and warmup > 0 else 0,
    )


def observe(run: Run, points: Sequence[Mapping[str, Any]]) -> list[HealthAlert]:
    """Judge the new points of one batch; the alerts of the episodes they opened. An evaluation is
    not judged: its checks watch an update it never makes (docs/health.md#at-ingestion)."""
    if not points or not run.is_judged:
        return []
    keys = {point["key"] for point in points} | {NON_FINITE_KEY}
    rules = [rule for rule in team_rules(run.team_id).values() if rule.enabled]
    watched = {rule.check.name: {key for key in keys if rule.check.watches(key)} for rule in rules}
    touched = [rule for rule in rules if watched[rule.check.name]]
    if not touched:
        return []
    # Only the watched keys' points: a check's window keeps nothing else (merge_window).
    new = series_of(points, set().union(*watched.values()))
    context = context_of(run)
    names = [rule.check.name for rule in touched]
    with transaction.atomic():
        rows = _locked_rows(run, names)
        opened = [rule for rule in touched if _judge(rows[rule.check.name], rule, new, context)]
        _save_verdicts(rows.values())
        alerts = [_open_episode(run, rows[rule.check.name], rule) for rule in opened]
    return alerts


def judge_batch(sender: object, run: Run, points: Sequence[Mapping[str, Any]], **_signal: object) -> None:
    """The receiver of webapp.ingestion.signals.metrics_stored: the batch's verdicts, in a savepoint,
    so a failing check costs the batch nothing: its points are stored all the same
    (docs/health.md#at-ingestion)."""
    try:
        with transaction.atomic():
            observe(run, points)
    except Exception:
        logger.exception("health checks of run %s failed on a metric batch; its points are stored", run.pk)


def _locked_rows(run: Run, names: list[str]) -> dict[str, RunHealth]:
    """The run's rows of these checks, locked; made first where missing (a run's first batches).
    Race: two batches of one run judged at once; the row locks make the second wait and read the
    first's windows and episode counts, so an episode is opened once."""
    locked = RunHealth.objects.select_for_update().filter(run=run, check_name__in=names)
    rows = {row.check_name: row for row in locked}
    if len(rows) < len(names):
        RunHealth.objects.bulk_create(
            [RunHealth(run=run, check_name=name) for name in names if name not in rows], ignore_conflicts=True
        )
        rows = {row.check_name: row for row in locked.all()}
    return rows


# One statement for every row of a batch: the ORM's bulk_update builds a CASE per field and row,
# which cost more than the query itself on the ingestion hot path (docs/health.md#at-ingestion).
_SAVE_VERDICTS = """
UPDATE results_runhealth AS h
SET firing = v.firing, since_step = v.since_step, step = v.step, value = v.value,
    episodes = v.episodes, "window" = v.win::jsonb
FROM unnest(%s::bigint[], %s::bool[], %s::int[], %s::int[], %s::float8[], %s::int[], %s::text[])
    AS v(id, firing, since_step, step, value, episodes, win)
WHERE h.id = v.id
"""


def _save_verdicts(rows: Iterable[RunHealth]) -> None:
    rows = list(rows)
    columns = (
        [row.pk for row in rows],
        [row.firing for row in rows],
        [row.since_step for row in rows],
        [row.step for row in rows],
        [row.value for row in rows],
        [row.episodes for row in rows],
        [orjson.dumps(row.window).decode() for row in rows],
    )
    with connection.cursor() as cursor:
        cursor.execute(_SAVE_VERDICTS, columns)


def _judge(row: RunHealth, rule: Rule, new: Mapping[str, Sequence[Point]], context: Context) -> bool:
    """Move the row's window and verdict; True when the check started firing."""
    window = merge_window(row.window, new, rule.check)
    row.window = {key: [list(point) for point in points] for key, points in window.items()}
    reading = rule.check.evaluate(window, rule.threshold, context)
    if reading is None:
        return False
    started = reading.firing and not row.firing
    if started:
        row.episodes += 1
        row.since_step = reading.step
    elif not reading.firing:
        row.since_step = None
    row.firing, row.step, row.value = reading.firing, reading.step, reading.value
    return started


def _open_episode(run: Run, row: RunHealth, rule: Rule) -> HealthAlert:
    alert, created = HealthAlert.objects.get_or_create(
        run=run, check_name=row.check_name, episode=row.episodes,
        defaults={"step": row.since_step or 0, "value": row.value or 0.0, "threshold": rule.threshold,
                  "stopped_run": rule.stop_run},
    )  # fmt: skip
    if created:
        members = run.team.memberships.values_list("user_id", flat=True)
        Notification.objects.bulk_create([Notification(user_id=user, alert=alert) for user in members])
        for delivery in alerts.new_deliveries(alert):  # each sent once the episode commits
            send_alert.delay_on_commit(delivery.pk)
        if rule.stop_run:
            alerts.stop_run(run, alert)
    return alert


def rewind(run_id: int, step: int) -> int:
    """A resumed run continues from its checkpoint of ``step`` (docs/resume.md#superseded): each
    check forgets the points after it, and a verdict read after it is withdrawn until the new
    attempt's points are judged. An episode opened after ``step`` ends there; its alert stays, as the
    record of what the first attempt did. Returns how many verdicts were withdrawn."""
    withdrawn = 0
    for row in RunHealth.objects.select_for_update().filter(run_id=run_id):
        row.window = {key: [p for p in points if p[0] <= step] for key, points in row.window.items()}
        if row.step is not None and row.step > step:
            withdrawn += 1
            row.step = row.value = None
            if row.since_step is None or row.since_step > step:
                row.firing, row.since_step = False, None
        row.save(update_fields=["window", "step", "value", "firing", "since_step"])
    return withdrawn


def panel(run: Run) -> list[tuple[HealthCheck, RunHealth | None, Rule]]:
    """Every check with its state on the run (None: no data yet), for the run page."""
    rows = {row.check_name: row for row in RunHealth.objects.filter(run=run).defer("window")}
    return [(rule.check, rows.get(name), rule) for name, rule in team_rules(run.team_id).items()]


def undelivered(run: Run) -> list[AlertDelivery]:
    """The run's alert deliveries that failed, or failed a try and wait for the next one."""
    failing = (
        AlertDelivery.objects.filter(alert__run=run).exclude(status=DeliveryStatus.SENT).exclude(error="")
    )
    return list(failing.select_related("alert").order_by("-alert__created", "channel"))
