"""REST reads of a run's trajectories: filtered and paginated as the rollout viewer's list, and one
with every step. Personal API token; runs outside the caller's teams are 404."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.utils.html import strip_tags
from ninja import Field, Query, Router, Schema

from webapp.accounts.token_auth import UserTokenAuth
from webapp.api import Page, PageParams, paginate
from webapp.experiments.access import get_run_for_user
from webapp.ingestion.models import Trajectory
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
