from __future__ import annotations

import uuid
from typing import Any

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from pydantic import ValidationError

from trainer.config import RunConfig, validation_errors
from trainer.contract import INT4_MAX
from trainer.registry import RegistryError
from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.datasets.picker import DatasetPicker
from webapp.experiments.acceptance import Refused, validated
from webapp.experiments.access import get_experiment_for_user, get_run_for_user
from webapp.experiments.demo import start_demo
from webapp.experiments.fork import fork_mapping
from webapp.experiments.forms import SFT_FIELD, ExperimentForm, initial_from_config
from webapp.experiments.models import (
    ACTIVE,
    LAUNCH_KEY,
    LAUNCHED_KINDS,
    Experiment,
    LaunchRefused,
    NameTaken,
    Run,
    RunKind,
    RunStatus,
    TeamRunLimit,
)
from webapp.experiments.tasks import cancel_run
from webapp.form_kit import labelled_errors
from webapp.htmx import HtmxHttpRequest, template_for
from webapp.retention.checkpoint_policy import KeepPolicy
from webapp.retention.models import ExperimentRetention
from webapp.retention.policy import Retention


def new_launch_key() -> str:
    """The hidden key of one launch form: submitting it twice launches once (Experiment.launch)."""
    return uuid.uuid4().hex


def launch_key_of(request: HttpRequest) -> str:
    key = str(request.POST.get("launch_key", ""))
    return key if LAUNCH_KEY.match(key) else ""


def stored_config(config: dict[str, Any]) -> tuple[RunConfig | None, str, str]:
    """(the config, its YAML, "") for a stored config this version reads; (None, the stored JSON as
    YAML, what is wrong) for one it no longer does (an older schema): the page shows it as stored."""
    try:
        parsed = RunConfig.model_validate(config)
    except ValidationError as error:
        problems = "; ".join(f"{path}: {' '.join(msgs)}" for path, msgs in validation_errors(error).items())
    except (ValueError, RegistryError) as error:
        problems = str(error)
    else:
        return parsed, parsed.to_yaml(), ""
    raw = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    return None, raw, problems


def form_choices(team: Team, picker: DatasetPicker) -> dict[str, list[tuple[str, str]]]:
    """The form's choices: the recipes, the datasets ``picker`` lists for the task, the team's tools.
    Loads the task recipes, whose defaults RunConfig.from_preset layers."""
    from tasks_lib.registry import load_recipes
    from webapp.tools.models import tool_choices

    return {
        "task": [(name, name) for name in load_recipes().names()],
        "train_dataset": picker.choices(),
        "tools": tool_choices(team),
    }


def dataset_picker(request: HttpRequest, team: Team, initial: dict[str, Any]) -> DatasetPicker:
    """The dataset pickers for the task the form shows (sent, else the one it opens with); the
    datasets a sent form (or a clone) names stay listed, so a misfit is refused by acceptance."""
    data = request.POST if request.method == "POST" else initial
    task = str(data.get("task") or "")
    named = [str(data.get(name) or "") for name in ("train_dataset", "val_dataset")]
    sft = data.get(SFT_FIELD) in (True, "on", "true", "True", "1")
    return DatasetPicker.for_task(team, task, keep=[pk for pk in named if pk], sft=sft)


@login_required
def index(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    # An experiment's runs are its seeds' training runs; its evaluations are counted apart.
    trains = Q(runs__kind__in=LAUNCHED_KINDS)  # RL or SFT, launched or external; not an evaluation
    experiments = Experiment.objects.filter(team=team).annotate(
        run_count=Count("runs", filter=trains),
        active_count=Count("runs", filter=trains & Q(runs__status__in=ACTIVE)),
        succeeded_count=Count("runs", filter=trains & Q(runs__status=RunStatus.SUCCEEDED)),
        failed_count=Count(
            "runs", filter=trains & Q(runs__status__in=(RunStatus.FAILED, RunStatus.CANCELLED))
        ),
        evaluation_count=Count("runs", filter=Q(runs__kind=RunKind.EVALUATION)),
    )
    context = {
        "team": team,
        "experiments": experiments.filter(sweep__isnull=True),
        "sweeps": team.sweeps.all()[:20],
        "run_limit": TeamRunLimit.of(team.pk),
    }
    return render(request, "experiments/index.html", context)


@login_required
def new(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    source = _clone_source(request, team_slug)
    fork = _fork_source(request, team_slug)
    initial = _initial(request, source) if fork is None else _fork_initial(*fork)
    picker = dataset_picker(request, team, initial)
    if source is None and fork is None:  # a new form (or a task switch): the recipe's datasets, else none
        initial.update(train_dataset=picker.train, val_dataset=picker.val)
    choices = form_choices(team, picker)
    form = ExperimentForm(request.POST or None, initial=initial, choices=choices, team=team)
    form.explain_datasets(picker.hint)
    previewing = "preview" in request.POST
    if previewing:
        form.allow_preview()
    preview = None
    if request.method == "POST" and form.is_valid():
        config = form.build_config()
        if config is not None and previewing:
            preview = config.to_yaml()
        elif config is not None:
            return _create(request, team, form, config, source)
    context = {
        "team": team,
        "form": form,
        "source": source,
        "fork": fork,
        "preview": preview,
        # The preview button swaps only its own section: it lists what stops a preview, or nothing shows.
        "preview_refused": labelled_errors(form) if previewing and preview is None else [],
        "launch_key": _form_key(request),
    }
    partials = {"advanced": "refill", "id_task": "task-defaults", f"id_{SFT_FIELD}": "task-defaults"}
    return render(request, template_for(request, "experiments/new.html", partials), context)


def _form_key(request: HttpRequest) -> str:
    # A form shown again after an error keeps its key: it is still the same launch.
    return launch_key_of(request) or new_launch_key()


def _create(
    request: HtmxHttpRequest, team: Team, form: ExperimentForm, config: RunConfig, source: Experiment | None
) -> HttpResponse:
    key = launch_key_of(request)
    try:
        data = form.cleaned_data
        experiment = Experiment.create(
            team,
            request.user,
            config,
            data["seeds"],
            description=data["description"],
            cloned_from=source,
            retention=form.retention_policy(),
        )
        form.keep_policy().save_for(experiment)
    except NameTaken as taken:
        earlier = Experiment.objects.filter(team=team, name=config.name, runs__launch_key=key).first()
        if key and earlier is not None:  # the same form sent twice (a double-click): it launched once
            messages.info(request, "Already launched: these are its runs.")
            return redirect("experiment", team_slug=team.slug, pk=earlier.pk)
        form.add_error("name", f"{taken}; choose another name.")
        context = {
            "team": team,
            "form": form,
            "source": source,
            "preview": None,
            "launch_key": _form_key(request),
        }
        return render(request, "experiments/new.html", context, status=400)
    if form.cleaned_data["launch"]:
        _launch_with_message(request, experiment, key)
    return redirect("experiment", team_slug=team.slug, pk=experiment.pk)


def _launch_with_message(request: HttpRequest, experiment: Experiment, key: str) -> None:
    try:
        launched = experiment.launch(key)
    except LaunchRefused as refused:
        messages.error(request, f"Not launched: {refused}.")
        return
    except Refused as refused:  # its stored config is no longer accepted (a dataset deleted since)
        messages.error(request, f"Not launched: {refused}")
        return
    if launched.replayed:
        messages.info(request, "Already launched: these are its runs.")
    else:
        messages.success(request, f"Launched {len(launched.runs)} run(s).")


def _clone_source(request: HttpRequest, team_slug: str) -> Experiment | None:
    clone_id = request.GET.get("clone") or request.POST.get("clone")
    if not clone_id or not str(clone_id).isdigit():
        return None
    return get_experiment_for_user(request, team_slug, int(clone_id))


def _fork_source(request: HttpRequest, team_slug: str) -> tuple[Run, int | None] | None:
    """The run and checkpoint step a Fork link names (?fork=<run>&step=<step>), docs/checkpoints.md#fork."""
    run_id, step = request.GET.get("fork", ""), request.GET.get("step", "")
    if not (run_id.isdigit() and len(run_id) <= 18):  # a bigint id, not a number Postgres refuses
        return None
    chosen = int(step) if step.isdigit() and int(step) <= INT4_MAX else None
    return get_run_for_user(request, team_slug, int(run_id)), chosen


def _fork_initial(run: Run, step: int | None) -> dict[str, Any]:
    """The form of a fork: the run's experiment's config, starting from the checkpoint, its one seed."""
    # Validated as acceptance does: a resumable config gets its launch-time checkpoint folder.
    config = validated(fork_mapping(run, step))
    return {**initial_from_config(config), "seeds": str(run.seed)}


def _initial(request: HttpRequest, source: Experiment | None) -> dict[str, Any]:
    """Values the form opens with: the clone source's, else the chosen preset's (and task's) defaults."""
    parsed = stored_config(source.config)[0] if source is not None else None
    if source is not None and parsed is not None:
        initial = initial_from_config(parsed)
        initial.update(name=f"{source.name} (clone)", seeds=",".join(map(str, source.seeds)))
        kept = ExperimentRetention.objects.filter(experiment=source).first()
        initial.update(Retention.of(kept).fields() if kept is not None else {})
        keep = KeepPolicy.of_experiment(source.pk)  # a clone keeps its source's keep-policy too
        initial.update(keep.fields() if keep is not None else {})
        return initial
    preset = request.GET.get("preset") or "grpo"
    task = request.GET.get("task") or "arithmetic"
    # The preset's defaults depend on the model's size (docs/presets.md): a folder's is read once chosen.
    model = request.GET.get("model_choice") or "smollm2-135m-instruct"
    model_path = request.GET.get("model_path", "") if model == "path" else model
    # ... and on the backend: a default it does not honour is left out (trainer.algos.presets).
    chosen = {"model.path": model_path, "backend": request.GET.get("backend") or "torch"}
    config = _defaults(preset, task, chosen)
    initial = initial_from_config(config)
    initial.update(name="", task=task, model_choice=model)
    if SFT_FIELD in request.GET:  # the SFT box: the dataset pickers list demonstrations
        initial[SFT_FIELD] = request.GET[SFT_FIELD]
    # The retention policy depends on nothing the refill changes: the user's choice stays.
    initial.update(
        {name: request.GET[name] for name in ExperimentForm.RETENTION_FIELDS if name in request.GET}
    )
    if model == "path":
        initial["model_path"] = model_path
    return initial


def _defaults(preset: str, task: str, chosen: dict[str, Any]) -> RunConfig:
    """The config the form opens with. A GPU backend's defaults validate only with a GPU, which the
    user sets next: they are taken with one; a preset or task that is not known falls back to grpo."""
    from tasks_lib.registry import load_recipes

    # The task recipe's defaults sit under the preset's; a web worker's first request may come here
    # before anything else has imported the recipes.
    load_recipes()
    for attempt in ({}, {"resources.gpus_per_node": 1}):
        try:
            return RunConfig.from_preset(preset, task=task, **chosen, **attempt)
        except (KeyError, ValueError):
            continue
    return RunConfig.from_preset("grpo", task=task, **{"model.path": chosen["model.path"]})


@login_required
@require_POST
def demo(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The empty dashboard's one click: the tool-learning demo (SFT, then GRPO from it) in the user's
    own team, launched."""
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    try:
        run = start_demo(team, request.user)
    except ValueError as error:
        messages.error(request, f"The demo could not start: {error}.")
        return redirect("dashboard", team_slug=team.slug)
    messages.success(
        request,
        "The demo is launched: this SFT run teaches the lookup tool for a few minutes; when it succeeds, "
        "a GRPO run starts from its checkpoint (linked below as a run started from it).",
    )
    return redirect("run", team_slug=team.slug, pk=run.pk)


@login_required
@require_POST
def launch(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    experiment = get_experiment_for_user(request, team_slug, pk, write=True)
    _launch_with_message(request, experiment, launch_key_of(request))
    return redirect("experiment", team_slug=team_slug, pk=experiment.pk)


@login_required
def cancel(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """GET: ask for confirmation; POST: cancel, on behalf of the user (the run ends "cancelled by")."""
    run = get_run_for_user(request, team_slug, pk, write=True)
    if request.method != "POST":
        return render(request, "experiments/run_cancel.html", {"team": run.team, "run": run})
    if not run.request_cancel(by=request.user):
        messages.info(request, f"The run is already {run.status}.")
    elif run.is_terminal:
        messages.success(request, "Cancelled before it started.")
    else:
        cancel_run.delay_on_commit(run.pk)  # stops the process group or the Ray job
        messages.success(request, "Cancelling: the run finishes its current step and stops.")
    return redirect("run", team_slug=team_slug, pk=run.pk)
