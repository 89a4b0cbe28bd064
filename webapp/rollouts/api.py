"""REST reads of a run's trajectories: filtered and paginated as the rollout viewer's list, one
with every step, and their histograms over steps. Personal API token; runs outside the caller's teams are 404."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils.html import strip_tags
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from webapp.accounts.access import get_team_for_user
from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import FieldError, Page, PageParams, paginate
from webapp.experiments.access import get_run_for_user
from webapp.ingestion.measures import MEASURES
from webapp.ingestion.models import Trajectory
from webapp.rollouts import compare, histograms
from webapp.rollouts.compare import MAX_SIDES
from webapp.rollouts.histograms import BINS, MAX_BINS, HeatMap, Histogram
from webapp.rollouts.search import SEARCH_RESULTS, search_hits
from webapp.rollouts.viewer import RolloutFilter, as_json

router = Router(auth=UserTokenAuth(), tags=["rollouts"])


class TrajectoryOut(Schema):
    id: str = Field(description="The trainer's trajectory id.")
    group_id: str
    sample_index: int
    rollout_index: int
    training_step: int
    data_source: str
    total_reward: float
    success: bool
    num_steps: int
    num_tool_calls: int
    num_tool_errors: int
    response_tokens: int
    metrics: dict[str, float]

    @staticmethod
    def resolve_id(obj: Trajectory) -> str:
        return obj.uid


@router.get(
    "/{team_slug}/runs/{int:run_id}/trajectories", response=Page[TrajectoryOut], summary="Trajectories"
)
def trajectories(
    request: HttpRequest,
    team_slug: str,
    run_id: int,
    filters: Query[RolloutFilter],
    paging: Query[PageParams],
) -> dict[str, Any]:
    """Filtered by step, reward range, success, tool errors, data source or group; paginated."""
    run = get_run_for_user(request, team_slug, run_id)
    chosen = filters.apply(Trajectory.objects.filter(run=run))
    return paginate(chosen.order_by("-training_step", "group_id", "rollout_index", "id"), paging)


@router.get("/{team_slug}/runs/{int:run_id}/trajectories/{uid}", summary="One trajectory with every step")
def trajectory(request: HttpRequest, team_slug: str, run_id: int, uid: str) -> dict[str, Any]:
    run = get_run_for_user(request, team_slug, run_id)
    return as_json(get_object_or_404(Trajectory, run=run, uid=uid), with_steps=True)


class BinOut(Schema):
    low: float = Field(description="The bin holds values >= low ...")
    below: float = Field(description="... and < below; the rollout list's measure_min and measure_below.")
    count: int


class HistogramOut(Schema):
    measure: str

    @staticmethod
    def resolve_measure(obj: Histogram | HeatMap) -> str:
        return obj.measure.name

    step: int
    bins: list[BinOut]


class HeatMapOut(Schema):
    measure: str

    @staticmethod
    def resolve_measure(obj: Histogram | HeatMap) -> str:
        return obj.measure.name

    edges: list[float] = Field(
        description="The value bins' edges: bin i holds edges[i] <= value < edges[i+1]."
    )
    steps: list[tuple[int, int]] = Field(description="Each column's first and last training step.")
    counts: list[list[int]] = Field(description="Trajectories per [column][value bin].")


class HistogramQuery(Schema):
    step: int | None = Field(None, ge=0, description="Default: the newest step with rollouts.")
    bins: int = Field(BINS, ge=1, le=MAX_BINS)


def _measure(name: str) -> str:
    if name not in MEASURES:
        raise HttpError(404, f"no measure {name!r}; one of {', '.join(MEASURES)}")
    return name


@router.get(
    "/{team_slug}/runs/{int:run_id}/histograms/{measure}",
    response=HistogramOut,
    summary="One step's histogram",
)
def step_histogram(
    request: HttpRequest, team_slug: str, run_id: int, measure: str, query: Query[HistogramQuery]
) -> Histogram:
    """Trajectories of one training step binned by a measure (reward, advantage, length, turns,
    tool_calls); a bin's low and below filter the trajectories list to exactly its trajectories."""
    run = get_run_for_user(request, team_slug, run_id)
    step = query.step if query.step is not None else histograms.latest_step(run.pk)
    if step is None:
        raise HttpError(404, "this run has no rollouts")
    return histograms.step_histogram(run.pk, _measure(measure), step, query.bins)


@router.get(
    "/{team_slug}/runs/{int:run_id}/histograms/{measure}/heatmap",
    response=HeatMapOut,
    summary="A measure's heat-map over every step",
)
def heat_map(
    request: HttpRequest, team_slug: str, run_id: int, measure: str, query: Query[HistogramQuery]
) -> HeatMap:
    """Every step's histogram of a measure on one set of value bins, steps grouped in columns."""
    run = get_run_for_user(request, team_slug, run_id)
    return histograms.heat_map(run.pk, _measure(measure), query.bins)


class SidesQuery(Schema):
    sides: list[str] = Field(
        [], description=f"2 to {MAX_SIDES} RUN:STEP pairs, repeated (?sides=12:40&sides=13:40&sides=12:80)."
    )
    rollout: int = Field(0, ge=0, description="Which of the n samples (the first when a step has fewer).")


class SideOut(Schema):
    run: int
    step: int
    uid: str
    total_reward: float
    advantage: float | None
    tool_path: list[tuple[str, str]] = Field(description="(kind, tool) against the first rollout's path.")


class CellOut(Schema):
    response: str
    tools: list[str]
    diff: list[tuple[str, str]] | None = Field(description="(same|added|removed, text) against the first.")


class AlignedStepOut(Schema):
    index: int
    cells: list[CellOut | None] = Field(description="One per side; null where it took fewer steps.")


class ManyRolloutsOut(Schema):
    sides: list[SideOut]
    steps: list[AlignedStepOut]


@router.get(
    "/{team_slug}/prompts/{int:sample}/rollouts",
    response=ManyRolloutsOut,
    summary="One prompt's rollouts aligned",
)
def prompt_rollouts(
    request: HttpRequest, team_slug: str, sample: int, query: Query[SidesQuery]
) -> dict[str, Any]:
    """Dataset row ``sample``'s rollouts in 2 to 8 runs or steps, aligned step by step, each diffed
    word by word against the first (docs/rollouts.md#same-prompt)."""
    get_team_for_user(request, team_slug)
    pairs = compare.parse_sides(query.sides, limit=MAX_SIDES)
    if not 2 <= len(pairs) == len(query.sides):
        raise FieldError([("sides", f"name 2 to {MAX_SIDES} sides as RUN:STEP")])
    found = []
    for run_id, step in pairs:
        side = compare.rollout_of_prompt(
            get_run_for_user(request, team_slug, run_id), sample, step, query.rollout
        )
        if side is None:
            raise HttpError(404, f"run {run_id} has no rollout of dataset row {sample} at step {step}")
        found.append(side)
    many = compare.compare_many(found)
    sides = [
        {
            "run": s.trajectory.run_id,
            "step": s.trajectory.training_step,
            "uid": s.trajectory.uid,
            "total_reward": s.trajectory.total_reward,
            "advantage": s.advantage,
            "tool_path": path,
        }
        for s, path in many.columns
    ]
    return {"sides": sides, "steps": many.steps}


class SearchHitOut(Schema):
    run: int
    trajectory: str = Field(description="The trajectory's id (GET .../trajectories/{id} reads it).")
    training_step: int
    step_index: int = Field(description="The step of the trajectory the words are in.")
    total_reward: float
    snippet: str = Field(description="Some 35 words around the first hits, as plain text.")


@router.get(
    "/{team_slug}/runs/{int:run_id}/search",
    response=list[SearchHitOut],
    summary="Full-text search of a run's responses and tool calls",
)
def search(
    request: HttpRequest, team_slug: str, run_id: int, q: str, filters: Query[RolloutFilter]
) -> list[dict[str, Any]]:
    """Web-search syntax (words, "quoted phrases", or, -word), newest training step first, at most
    SEARCH_RESULTS hits, within the rollout list's filters (docs/rollouts.md#search)."""
    run = get_run_for_user(request, team_slug, run_id)
    text = q.replace("\x00", "").strip()[:500]
    if not text:
        return []
    return [
        {
            "run": hit.run.pk,
            "trajectory": hit.trajectory.uid,
            "training_step": hit.trajectory.training_step,
            "step_index": hit.step_index,
            "total_reward": hit.trajectory.total_reward,
            "snippet": strip_tags(hit.snippet),
        }
        for hit in search_hits([run.pk], filters, text)[:SEARCH_RESULTS]
    ]
