"""Sweeps: one launch over a grid of presets x tasks x seeds x up to two hyperparameters
(docs/sweeps.md).

Each cell is an experiment (its preset, its task, its hyperparameter values) whose runs are the
sweep's seeds, so the runs table, the run page and the task x algorithm comparison take a sweep's
runs as they take any other. Every cell's config goes through webapp.experiments.acceptance.accept, as
every experiment's does, before anything is made: a grid with one cell that could never run is
refused whole, with the cell and the field to change.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from pydantic import BaseModel, ConfigDict, Field

from trainer.config import RunConfig, flatten_paths
from webapp.accounts.models import Team
from webapp.experiments.acceptance import MAX_NAME_LENGTH, MAX_SEEDS, Refused, Seed, accept
from webapp.experiments.models import ACTIVE, Experiment, NameTaken, Sweep

MAX_SWEEP_RUNS = 64  # cells x seeds: more would queue a day of CPU training behind one click
MAX_AXIS_VALUES = 16
MAX_SWEEP_NAME = 100  # each cell's experiment is named "<sweep> · <its coordinates>" within 200
# The paths a cell sets itself: a hyperparameter axis may not name them.
CELL_PATHS = frozenset({"name", "preset", "task", "trainer.seed", "data.train_path", "data.val_path"})
Value = float | int | str | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskAxis(_Strict):
    task: str = Field(max_length=100, description="A task recipe's name.")
    train_path: str = Field(
        "", max_length=200, description="Its training dataset (dataset:<id>); empty: the base config's."
    )
    val_path: str | None = Field(
        "", max_length=200, description="Its validation dataset; empty: the base config's; null: none."
    )


class ParamAxis(_Strict):
    path: str = Field(
        max_length=100, description="A RunConfig dotted path, e.g. optim.lr or algorithm.kl_coef."
    )
    values: list[Value] = Field(min_length=1, max_length=MAX_AXIS_VALUES)


class SweepSpec(_Strict):
    """A sweep's grid: every combination of the axes is a cell, every cell runs every seed."""

    name: str = Field(min_length=1, max_length=MAX_SWEEP_NAME)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="RunConfig fields every cell shares (nested or by dotted path), over each cell's "
        "task recipe's defaults over its preset's, as for an experiment.",
    )
    presets: list[str] = Field(
        default_factory=list, max_length=MAX_AXIS_VALUES, description="Empty: the config's preset (grpo)."
    )
    tasks: list[TaskAxis] = Field(
        default_factory=list, max_length=MAX_AXIS_VALUES, description="Empty: the config's task."
    )
    params: list[ParamAxis] = Field(
        default_factory=list, max_length=2, description="Up to two hyperparameters."
    )
    seeds: list[Seed] = Field(default_factory=lambda: [1], min_length=1, max_length=MAX_SEEDS)


class SweepRefused(ValueError):
    """The grid cannot be made: (field path, message) of each problem, the cell named in the message."""

    def __init__(self, problems: list[tuple[str, str]], *, status: int = 400) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = problems
        self.status = status


@dataclass(frozen=True)
class Cell:
    preset: str
    task: TaskAxis
    params: dict[str, Value]

    @property
    def label(self) -> str:
        values = [f"{path.rsplit('.', 1)[-1]}={value}" for path, value in self.params.items()]
        return " · ".join(part for part in [self.preset, self.task.task, *values] if part)

    def coordinates(self) -> dict[str, Any]:
        return {"preset": self.preset, "task": self.task.task, "params": self.params}


def cells(spec: SweepSpec) -> list[Cell]:
    """The grid in launch order: presets, then tasks, then the hyperparameters' values."""
    base = flatten_paths(spec.config)
    presets = spec.presets or [str(base.get("preset") or "grpo")]
    tasks = spec.tasks or [
        TaskAxis.model_construct(task=str(base.get("task") or ""), train_path="", val_path="")
    ]
    axes = [[(axis.path, value) for value in axis.values] for axis in spec.params]
    settings = list(itertools.product(*axes))  # [()] without hyperparameters: one cell per preset x task
    return [Cell(preset, task, dict(values)) for preset in presets for task in tasks for values in settings]


def grid_problems(spec: SweepSpec) -> list[tuple[str, str]]:
    """What is wrong with the grid's shape, before any cell's config is built."""
    problems = []
    paths = [axis.path for axis in spec.params]
    if len(set(paths)) != len(paths):
        problems.append(("params", "each hyperparameter may be swept once"))
    problems += [
        ("params", f"{path} is set by each cell itself: sweep presets or tasks instead")
        for path in paths
        if path in CELL_PATHS
    ]
    for name, values in (("presets", spec.presets), ("seeds", spec.seeds), ("tasks", spec.tasks)):
        if len({json.dumps(v if not isinstance(v, BaseModel) else v.model_dump()) for v in values}) != len(
            values
        ):
            problems.append((name, "each value may appear once"))
    size = _cell_count(spec) * len(spec.seeds)
    if size > MAX_SWEEP_RUNS:
        problems.append(("seeds", f"the grid has {size} runs; at most {MAX_SWEEP_RUNS}: sweep fewer values"))
    return problems


def _cell_count(spec: SweepSpec) -> int:
    count = max(len(spec.presets), 1) * max(len(spec.tasks), 1)
    for axis in spec.params:
        count *= len(axis.values)
    return count


def cell_config(team: Team, spec: SweepSpec, cell: Cell) -> RunConfig:
    """The cell's RunConfig, checked as an experiment's is; SweepRefused naming the cell if refused."""
    overrides: dict[str, Any] = {**flatten_paths(spec.config), **cell.params}
    overrides.update(
        preset=cell.preset, task=cell.task.task, name=f"{spec.name} · {cell.label}"[:MAX_NAME_LENGTH]
    )
    if cell.task.train_path:
        overrides["data.train_path"] = cell.task.train_path
    if cell.task.val_path != "":
        overrides["data.val_path"] = cell.task.val_path
    overrides["trainer.seed"] = spec.seeds[0]
    try:
        return accept(team, overrides)
    except Refused as refused:
        where = f"cell {cell.label}"
        problems = [(f"config.{path}", f"{where}: {message}") for path, message in refused.problems]
        raise SweepRefused(problems, status=422 if refused.valid else 400) from None


def create_sweep(team: Team, user: Any, spec: SweepSpec, *, launch: bool = True) -> Sweep:
    """Check every cell, then make the sweep, one experiment per cell, and launch them in grid order
    (the team's limit starts them in turn). SweepRefused, nothing made, if any cell is refused."""
    problems = grid_problems(spec)
    if problems:
        raise SweepRefused(problems)
    planned = [(cell, cell_config(team, spec, cell)) for cell in cells(spec)]
    try:
        with transaction.atomic():
            # Race: the same sweep sent twice (a double-click); the unique (team, name) lets one in.
            sweep = Sweep.objects.create(team=team, name=spec.name, spec=spec.model_dump(), created_by=user)
            made = [_make_cell(team, user, sweep, cell, config, spec.seeds) for cell, config in planned]
            if launch:
                for experiment in made:
                    experiment.launch(f"sweep-{sweep.pk}")
    except IntegrityError:
        raise SweepRefused(
            [("name", f"the team already has a sweep named {spec.name!r}")], status=409
        ) from None
    except NameTaken as taken:
        raise SweepRefused([("name", f"{taken}: choose another sweep name")], status=409) from None
    return sweep


def _make_cell(
    team: Team, user: Any, sweep: Sweep, cell: Cell, config: RunConfig, seeds: list[int]
) -> Experiment:
    experiment = Experiment.create(
        team, user, config, seeds, description=f"A cell of the sweep {sweep.name}."
    )
    Experiment.objects.filter(pk=experiment.pk).update(sweep=sweep, cell=cell.coordinates())
    return experiment


def cancel_sweep(sweep: Sweep, user: Any) -> int:
    """Cancel every active run of the sweep on behalf of ``user``; how many were asked to stop."""
    from webapp.experiments.tasks import cancel_run

    asked = 0
    for run in sweep.runs().filter(status__in=ACTIVE):
        if run.request_cancel(by=user):
            asked += 1
            if not run.is_terminal:
                cancel_run.delay_on_commit(run.pk)  # stops its process; the reaper finishes it
    return asked


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
