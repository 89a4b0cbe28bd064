from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from trainer.config import RunConfig, diff
from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.experiments import services
from webapp.experiments.access import get_experiment_for_user, get_run_for_user
from webapp.experiments.confine import ConfigRefused
from webapp.experiments.forms import ExperimentForm, initial_from_config
from webapp.experiments.logs import log_tail
from webapp.experiments.models import Experiment
from webapp.experiments.tasks import cancel_run
from webapp.htmx import HtmxHttpRequest

STOP_POLLING = 286  # htmx stops an `every 2s` poll when it gets this status


def form_choices(team: Team) -> dict[str, list[tuple[str, str]]]:
    """The form's choices. Loads the task recipes, whose defaults RunConfig.from_preset layers."""
    from tasks_lib.registry import load_recipes
    from trainer.algos.presets import PRESETS
    from webapp.datasets.models import Dataset
    from webapp.tools.models import tool_choices

    return {
        "task": [(name, name) for name in load_recipes().names()],
        "preset": [(name, f"{name} — {PRESETS.get(name).description}") for name in PRESETS.names()],
        "train_dataset": [(str(d.pk), str(d)) for d in Dataset.usable_for(team)],
        "tools": tool_choices(team),
    }


@login_required
def index(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    experiments = Experiment.objects.filter(team=team).prefetch_related("runs")
    return render(request, "experiments/index.html", {"team": team, "experiments": experiments})


@login_required
def new(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    source = _clone_source(request, team_slug)
    choices = form_choices(team)
    form = ExperimentForm(request.POST or None, initial=_initial(request, source), team=team, choices=choices)
    preview = None
    if request.method == "POST" and form.is_valid():
        config = form.build_config()
        if config is not None and "preview" in request.POST:
            preview = config.to_yaml()
        elif config is not None:
            experiment = services.create_experiment(
                team, request.user, config, form.cleaned_data["seeds"],
                description=form.cleaned_data["description"], cloned_from=source,
            )  # fmt: skip
            if form.cleaned_data["launch"]:
                _launch(request, experiment)
            return redirect("experiment", team_slug=team.slug, pk=experiment.pk)
    context = {"team": team, "form": form, "source": source, "preview": preview}
    template = (
        "experiments/new.html#advanced"
        if request.htmx and request.GET.get("partial")
        else "experiments/new.html"
    )
    return render(request, template, context)


def _clone_source(request: HttpRequest, team_slug: str) -> Experiment | None:
    clone_id = request.GET.get("clone") or request.POST.get("clone")
    if not clone_id or not str(clone_id).isdigit():
        return None
    return get_experiment_for_user(request, team_slug, int(clone_id))


def _initial(request: HttpRequest, source: Experiment | None) -> dict[str, Any]:
    """Values the form opens with: the clone source's, else the chosen preset's (and task's) defaults."""
    if source is not None:
        initial = initial_from_config(RunConfig.model_validate(source.config))
        initial.update(name=f"{source.name} (clone)", seeds=",".join(map(str, source.seeds)))
        return initial
    preset = request.GET.get("preset") or "grpo"
    task = request.GET.get("task") or "arithmetic"
    try:
        config = RunConfig.from_preset(preset, task=task)
    except (KeyError, ValueError):
        config = RunConfig.from_preset("grpo", task=task)
    initial = initial_from_config(config)
    initial.update(name="", task=task, model_choice="smollm2-135m-instruct", train_dataset="", val_dataset="")
    return initial


@login_required
def detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    experiment = get_experiment_for_user(request, team_slug, pk)
    config = RunConfig.model_validate(experiment.config)
    changes = None
    if experiment.cloned_from is not None:
        changes = diff(RunConfig.model_validate(experiment.cloned_from.config), config)
    runs = experiment.runs.all()
    context = {"team": experiment.team, "experiment": experiment, "config_yaml": config.to_yaml(),
               "changes": changes, "runs": runs}  # fmt: skip
    if request.htmx and request.GET.get("partial") == "runs":
        active = any(not run.is_terminal for run in runs)
        return render(
            request, "experiments/detail.html#runs", context, status=200 if active else STOP_POLLING
        )
    return render(request, "experiments/detail.html", context)


@login_required
@require_POST
def launch(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    experiment = get_experiment_for_user(request, team_slug, pk, write=True)
    _launch(request, experiment)
    return redirect("experiment", team_slug=team_slug, pk=experiment.pk)


def _launch(request: HttpRequest, experiment: Experiment) -> None:
    try:
        runs = services.launch(experiment)
    except ConfigRefused as refused:
        messages.error(request, f"Not launched: {refused}")
        return
    messages.success(request, f"Launched {len(runs)} run(s).")


@login_required
def run_detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, pk)
    context = {
        "team": run.team,
        "run": run,
        "log": log_tail(run),
        "config_yaml": RunConfig.model_validate(run.config).to_yaml(),
        "params": run.params.all(),
        "tags": run.tags.all(),
    }
    if request.htmx and request.GET.get("partial") == "live":
        return render(
            request, "experiments/run.html#live", context, status=STOP_POLLING if run.is_terminal else 200
        )
    return render(request, "experiments/run.html", context)


@login_required
@require_POST
def cancel(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    run = get_run_for_user(request, team_slug, pk, write=True)
    if not run.request_cancel():
        messages.info(request, f"The run is already {run.status}.")
    elif run.is_terminal:
        messages.success(request, "Cancelled before it started.")
    else:
        cancel_run.delay_on_commit(run.pk)  # stops the process group or the Ray job
        messages.success(request, "Cancelling: the run finishes its current step and stops.")
    return redirect("run", team_slug=team_slug, pk=run.pk)
