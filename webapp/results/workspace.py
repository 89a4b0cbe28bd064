"""The curve workspace: a grid of panels, one metric key each, kept per user and per experiment (or
per team for an ad-hoc selection of runs). Until the user changes it, a workspace shows the default
RL layout: the quantities an RL run is judged by, in the trainer's own key names."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from trainer.contract import (
    ACTOR_CLIPFRAC,
    ACTOR_ENTROPY,
    ACTOR_KL,
    RESPONSE_LENGTH_MEAN,
    REWARD_MEAN,
    TIMING_STEP_S,
    TOOL_USE_KEYS,
    TOOLS_ERROR_RATE,
    VAL_PREFIX,
    val_key,
)
from webapp.results.models import LayoutKind, SavedLayout

MAX_PANELS = 16
ACTIONS = ("add", "remove", "log", "reset")


class Panel(BaseModel):
    key: str = Field(min_length=1, max_length=250)
    log: bool = Field(default=False, description="Log-scale y axis.")


class Layout(BaseModel):
    panels: list[Panel] = Field(default_factory=list, max_length=MAX_PANELS)


def default_keys(tasks: Iterable[str], logged: Sequence[str]) -> list[str]:
    """Reward, the tool-use rates beside it when the run logged them (docs/health.md#tool-use),
    validation accuracy (per task), KL, entropy, clip fraction, response length, tool error rate and
    step time. Runs that logged none of them (an MLflow client logging its own names) get their first
    keys instead, so the page is never a grid of empty panels."""
    validation = [val_key(task) for task in dict.fromkeys(tasks) if task]
    if not validation:
        validation = [key for key in logged if key.startswith(VAL_PREFIX) and key.endswith("/acc")][:2]
    tool_use = [key for key in TOOL_USE_KEYS if key in logged]
    keys = [
        REWARD_MEAN,
        *tool_use,
        *validation,
        ACTOR_KL,
        ACTOR_ENTROPY,
        ACTOR_CLIPFRAC,
        RESPONSE_LENGTH_MEAN,
        TOOLS_ERROR_RATE,
        TIMING_STEP_S,
    ]
    if logged and not set(keys) & set(logged):
        return list(logged[:8])
    return keys[:MAX_PANELS]


def saved_panels(user: Any, team: Any, experiment: Any) -> list[Panel] | None:
    """The panels this user kept for this workspace; None: they never changed the default."""
    saved = SavedLayout.load(user, team, experiment, LayoutKind.CURVES)
    if saved is None:
        return None
    try:
        return Layout.model_validate(saved).panels
    except ValidationError:
        return None  # a layout an older version wrote: start again from the default


def panels_for(
    user: Any, team: Any, experiment: Any, tasks: Iterable[str], logged: Sequence[str]
) -> tuple[list[Panel], bool]:
    """(the panels, whether they are the default layout) of this user's workspace."""
    saved = saved_panels(user, team, experiment)
    if saved is not None:
        return saved, False
    return [Panel(key=key) for key in default_keys(tasks, logged)], True


def changed(panels: Sequence[Panel], action: str, key: str) -> list[Panel]:
    """The panels after one change: add a key's panel, remove it, or flip its log scale."""
    current = list(panels)
    if action == "add" and key and all(panel.key != key for panel in current):
        return [*current, Panel(key=key)][:MAX_PANELS]
    if action == "remove":
        return [panel for panel in current if panel.key != key]
    if action == "log":
        return [Panel(key=p.key, log=not p.log) if p.key == key else p for p in current]
    return current


def save(user: Any, team: Any, experiment: Any, panels: Sequence[Panel]) -> None:
    layout = Layout(panels=list(panels)[:MAX_PANELS])
    SavedLayout.store(user, team, experiment, LayoutKind.CURVES, layout.model_dump())


def reset(user: Any, team: Any, experiment: Any) -> None:
    SavedLayout.objects.filter(user=user, team=team, experiment=experiment, kind=LayoutKind.CURVES).delete()
