"""The getting-started checklist of a team's dashboard: dataset → tool → experiment → run. Shown
until each step is done; each step is one EXISTS query."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from webapp.accounts.models import Team


@dataclass(frozen=True)
class Step:
    key: str
    label: str
    hint: str
    url: str
    done: bool


def checklist(team: Team) -> list[Step]:
    from webapp.datasets.models import Dataset
    from webapp.experiments.models import Experiment, Run, RunStatus
    from webapp.tools.models import TeamTool, ToolTrial

    slug = team.slug
    has_tool = TeamTool.objects.filter(team=team).exists() or ToolTrial.objects.filter(team=team).exists()
    return [
        Step(
            "dataset",
            "Add a dataset",
            "Upload a parquet file, or create one from a built-in recipe.",
            reverse("datasets", args=[slug]),
            Dataset.usable_for(team).exists(),
        ),
        Step(
            "tool",
            "Register or try a tool",
            "Register your team's HTTP tool, or try a built-in one.",
            reverse("tools", args=[slug]),
            has_tool,
        ),
        Step(
            "experiment",
            "Create an experiment",
            "Pick a task, a dataset, a model and an algorithm preset.",
            reverse("experiment_new", args=[slug]),
            Experiment.objects.filter(team=team).exists(),
        ),
        Step(
            "run",
            "Launch a run",
            "Launch the experiment and watch its curves and rollouts.",
            reverse("experiments", args=[slug]),
            Run.objects.filter(team=team).exclude(status=RunStatus.DRAFT).exists(),
        ),
    ]


def next_step(steps: list[Step]) -> Step | None:
    return next((step for step in steps if not step.done), None)
