"""A fork's curve continuing its parent's (docs/checkpoints.md#lineage): with the workspace's
*Continue forks from their parents* box, a run that started from another run's checkpoint of step S is
drawn after that run's points up to S, its own step k at S + k, and so on up its chain of parents.
Only the drawing moves: each run's stored points stay its own, so nothing counts a parent's steps twice.
A parent the chart draws too is not drawn again under the fork: the fork's line starts at S, where the
workspace marks "forked from … step S".
"""

from __future__ import annotations

from typing import Any

from webapp.experiments.models import Run
from webapp.ingestion import metrics_store

MAX_GENERATIONS = 20  # a chain of forks longer than this is drawn from its 20th ancestor on


def ancestry(run: Run) -> list[tuple[Run, int]]:
    """The run's parents, oldest first, each with the step of its checkpoint the next one started from."""
    chain: list[tuple[Run, int]] = []
    child = run
    while (
        child.started_from_id is not None
        and child.started_from_step is not None
        and len(chain) < MAX_GENERATIONS
    ):
        parent = Run.objects.filter(pk=child.started_from_id, team_id=run.team_id).first()
        if parent is None or any(parent.pk == seen.pk for seen, _ in chain) or parent.pk == run.pk:
            break
        chain.insert(0, (parent, child.started_from_step))
        child = parent
    return chain


def fork_origin(run: Run) -> dict[str, Any] | None:
    """The run a fork started from and the step of that run's checkpoint, which the workspace writes
    on the fork's curves ("forked from … step S"); None for a run that is no fork."""
    chain = ancestry(run)
    if not chain:
        return None
    parent, step = chain[-1]
    return {"run": parent.pk, "name": str(parent), "step": step}


def continued_series(
    run: Run, key: str, lo: int | None, hi: int | None, drawn_runs: frozenset[int] = frozenset()
) -> dict[str, Any]:
    """The run's series of ``key`` drawn after its parents' (each up to its fork's step), on one step
    axis, narrowed to [lo, hi] of that axis. The points of a parent in ``drawn_runs`` (a run the
    chart draws itself) and of its own parents are left out: the fork's line starts where it leaves
    them."""
    merged = metrics_store.Series(run.pk, key)
    offset = 0
    chain = ancestry(run)
    shown = [i for i, (parent, _) in enumerate(chain) if parent.pk in drawn_runs]
    first_own = shown[-1] + 1 if shown else 0
    for i, (parent, until) in enumerate(chain):
        if i >= first_own:
            _extend(merged, metrics_store.downsample(parent.pk, key, None, until), offset)
        offset += until
    _extend(merged, metrics_store.downsample(run.pk, key), offset)
    keep = [
        i for i, step in enumerate(merged.step) if (lo is None or step >= lo) and (hi is None or step <= hi)
    ]
    drawn = merged.as_dict()
    for name in ("step", "value", "ts"):
        drawn[name] = [drawn[name][i] for i in keep]
    drawn["forked_at"] = offset  # where the run's own steps begin on this axis (0: not a fork)
    return drawn


def _extend(merged: metrics_store.Series, part: metrics_store.Series, offset: int) -> None:
    merged.step.extend(step + offset for step in part.step)
    merged.value.extend(part.value)
    merged.ts.extend(part.ts)
