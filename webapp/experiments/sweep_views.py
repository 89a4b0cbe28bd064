"""The sweep pages: the New-sweep form (from an experiment, or the experiments list), its one-click
cancel, and the team's limit on active runs (docs/sweeps.md). The sweep's grid is
webapp.results.sweep_page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from pydantic import ValidationError

from trainer.config import flatten_paths
from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.experiments import sweeps
from webapp.experiments.access import get_sweep_for_user
from webapp.experiments.models import MAX_ACTIVE_LIMIT, Experiment, TeamRunLimit

# What a sweep takes from its base experiment: the model, the data, the budget and the batch's shape
# (group size and mini-batches, which must divide each other). The rest (the estimator, the loss,
# the learning rates) is each cell's preset's, for its model (docs/sweeps.md#cells).
BASE_PATHS = (
    "model.path",
    "executor",
    "backend",
    "resources.cpus",
    "resources.gpus_per_node",
    "resources.nodes",
    "trainer.total_steps",
    "trainer.batch_size",
    "trainer.val_every",
    "trainer.save_every",
    "rollout.n",
    "optim.mini_batch_size",
    "optim.micro_batch_size",
    "trainer.num_threads",
    "rollout.max_steps",
    "rollout.max_new_tokens",
    "rollout.tools",
    "data.train_path",
    "data.val_path",
    "data.max_prompt_length",
    "data.max_response_length",
)
# The hyperparameters the form offers to sweep (the REST API takes any RunConfig path).
SWEEPABLE = (
    "optim.lr",
    "algorithm.kl_coef",
    "algorithm.entropy_coef",
    "algorithm.clip_high",
    "rollout.n",
    "rollout.temperature",
    "optim.ppo_epochs",
    "trainer.total_steps",
    "trainer.batch_size",
)


def _parse_list(text: str, what: str) -> list[Any]:
    values: list[Any] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            values.append(int(part) if part.lstrip("-").isdigit() else float(part))
        except ValueError:
            raise forms.ValidationError(
                f"{what}: {part!r} is not a number; give numbers separated by commas."
            ) from None
    return values


class SweepForm(forms.Form):
    name = forms.CharField(max_length=sweeps.MAX_SWEEP_NAME, label="Name")
    base = forms.ChoiceField(
        label="Base experiment", help_text="Its model, datasets and budget (steps, batch) are every cell's."
    )
    presets = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, label="Presets")
    tasks = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        label="Tasks",
        help_text="Each with the training dataset it runs on.",
    )
    seeds = forms.CharField(
        initial="1,2", label="Seeds", help_text="Comma-separated; every cell runs each seed."
    )
    param1 = forms.ChoiceField(required=False, label="Hyperparameter 1")
    values1 = forms.CharField(required=False, label="Values", help_text="Comma-separated, e.g. 1e-5, 3e-5.")
    param2 = forms.ChoiceField(required=False, label="Hyperparameter 2")
    values2 = forms.CharField(required=False, label="Values")

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        from tasks_lib.registry import load_recipes
        from trainer.algos.presets import PRESETS
        from webapp.datasets.models import Dataset

        super().__init__(*args, **kwargs)
        self.team = team
        bases = Experiment.objects.filter(team=team, external=False, sweep__isnull=True).order_by("-created")
        self.fields["base"].choices = [(str(e.pk), e.name) for e in bases]  # type: ignore[attr-defined]
        self.fields["presets"].choices = [(n, n) for n in PRESETS.names()]  # type: ignore[attr-defined]
        datasets = list(Dataset.offered_to(team))
        self.fields["tasks"].choices = [  # type: ignore[attr-defined]
            (f"{task}|{d.pk}", f"{task} — {d}")
            for task in load_recipes().names()
            for d in datasets
            if d.task_mismatch(task) is None
        ]
        params = [("", "— none —"), *((p, p) for p in SWEEPABLE)]
        self.fields["param1"].choices = self.fields["param2"].choices = params  # type: ignore[attr-defined]

    def clean_seeds(self) -> list[int]:
        return _parse_list(self.cleaned_data["seeds"], "Seeds")

    def spec(self) -> sweeps.SweepSpec | None:
        """The grid the form describes, or None with the error put on the form."""
        data = self.cleaned_data
        base = Experiment.objects.get(pk=int(data["base"]), team=self.team)
        stored = flatten_paths(base.config)
        config = {path: stored[path] for path in BASE_PATHS if path in stored}
        tasks = []
        for choice in data["tasks"]:
            task, dataset = choice.split("|")
            same_data = task == base.task and stored.get("data.train_path") == f"dataset:{dataset}"
            tasks.append(
                {"task": task, "train_path": f"dataset:{dataset}", "val_path": "" if same_data else None}
            )
        params = []
        for path_field, values_field in (("param1", "values1"), ("param2", "values2")):
            if data.get(path_field):
                try:
                    values = _parse_list(data.get(values_field) or "", "Values")
                except forms.ValidationError as error:
                    self.add_error(values_field, error)
                    return None
                params.append({"path": data[path_field], "values": values})
        try:
            return sweeps.SweepSpec.model_validate(
                {
                    "name": data["name"],
                    "config": config,
                    "presets": data["presets"],
                    "tasks": tasks,
                    "params": params,
                    "seeds": data["seeds"],
                }
            )
        except ValidationError as error:
            for problem in error.errors():
                where = ".".join(str(part) for part in problem["loc"])
                self.add_error(None, f"{where}: {problem['msg']}")
            return None


@login_required
def sweep_new(request: HttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = SweepForm(request.POST or None, initial=_initial(team, request.GET.get("base", "")), team=team)
    if request.method == "POST" and form.is_valid():
        spec = form.spec()
        if spec is not None:
            try:
                sweep = sweeps.create_sweep(team, request.user, spec)
            except sweeps.SweepRefused as refused:
                for _path, message in refused.problems:
                    form.add_error(None, message)
            else:
                messages.success(
                    request, f"Launched {sweep.runs().count()} runs in {sweep.cells.count()} cells."
                )
                return redirect("sweep", team_slug=team.slug, pk=sweep.pk)
    status = 400 if request.method == "POST" else 200
    context = {"team": team, "form": form, "max_runs": sweeps.MAX_SWEEP_RUNS}
    return render(request, "experiments/sweep_new.html", context, status=status)


def _initial(team: Team, base_id: str) -> dict[str, Any]:
    base = Experiment.objects.filter(team=team, pk=int(base_id)).first() if base_id.isdigit() else None
    if base is None:
        return {"presets": ["grpo"]}
    train = str(flatten_paths(base.config).get("data.train_path") or "").removeprefix("dataset:")
    return {
        "name": f"{base.name} sweep"[: sweeps.MAX_SWEEP_NAME],
        "base": str(base.pk),
        "presets": [base.preset],
        "tasks": [f"{base.task}|{train}"],
    }


@login_required
def sweep_cancel(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """GET: ask for confirmation; POST: cancel every active run of the sweep on behalf of the user."""
    sweep = get_sweep_for_user(request, team_slug, pk, write=True)
    active = sweep.runs().exclude(status__in=("succeeded", "failed", "cancelled")).count()
    if request.method != "POST":
        return render(
            request, "experiments/sweep_cancel.html", {"team": sweep.team, "sweep": sweep, "active": active}
        )
    asked = sweeps.cancel_sweep(sweep, request.user)
    if asked:
        messages.success(request, f"Cancelling {asked} run{'s' if asked != 1 else ''} of the sweep.")
    else:
        messages.info(request, "No run of the sweep was still active.")
    return redirect("sweep", team_slug=team_slug, pk=sweep.pk)


class LimitForm(forms.Form):
    max_active = forms.IntegerField(
        min_value=1,
        max_value=MAX_ACTIVE_LIMIT,
        label="Runs at once",
        help_text="Local runs of the team that train at the same time; the rest wait queued, in order.",
    )


@login_required
@require_POST
def run_limit(request: HttpRequest, team_slug: str) -> HttpResponse:
    """The team owner sets how many local runs train at once."""
    team = get_team_for_user(request, team_slug, role=Role.OWNER)
    form = LimitForm(request.POST)
    if form.is_valid():
        TeamRunLimit.set(team, form.cleaned_data["max_active"])
        messages.success(request, f"Up to {form.cleaned_data['max_active']} runs train at once.")
    else:
        messages.error(request, f"Not saved: give a whole number from 1 to {MAX_ACTIVE_LIMIT}.")
    return redirect("experiments", team_slug=team.slug)
