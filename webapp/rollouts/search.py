"""Full-text search over stored steps (docs/rollouts.md#search): a run's newest trajectories first,
the GIN index for rare words, and snippets marked by Postgres."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.db.models import F, QuerySet
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from webapp.experiments.models import Run
from webapp.ingestion.models import (
    TextBlob,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)
from webapp.ingestion.trajectories import SEARCH_CONFIG, SEARCH_DOC_MAX
from webapp.rollouts.viewer import RolloutFilter

SEARCH_RESULTS = 50
Found = TypeVar("Found")
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
        # The run named on both sides of the join: each probe reads its partition only
        # (docs/rollouts.md#partitioning), not one index of every partition.
        .filter(trajectory__in=newest.values("pk")[:SEARCH_WALK], run_id=run_id, trajectory__run_id=run_id)
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
    return _searched(run_ids, filters, text, limit, list)


def search_trajectory_ids(
    run_ids: Sequence[int], filters: RolloutFilter, text: str, *, limit: int
) -> list[int]:
    """The trajectory of each step search_steps finds, in its order: ids only, no rows to build."""
    return _searched(
        run_ids, filters, text, limit, lambda steps: list(steps.values_list("trajectory_id", flat=True))
    )


def _searched(
    run_ids: Sequence[int],
    filters: RolloutFilter,
    text: str,
    limit: int,
    read: Callable[[QuerySet[TrajectoryStep]], list[Found]],
) -> list[Found]:
    if len(run_ids) == 1:
        found = read(search_newest(run_ids[0], filters, text, limit))
        if len(found) == limit:
            return found
    return read(search_by_index(run_ids, filters, text, limit))


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
