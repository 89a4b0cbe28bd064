"""Evaluation runs: a saved checkpoint of a run, or the experiment's base model, scored on a dataset
split with k samples per prompt (docs/evaluations.md).

An evaluation is a :class:`Run` of kind ``evaluation`` (docs/evaluations.md#an-evaluation-is-a-run):
its frozen config is the experiment's with ``evaluation.enabled`` and the checkpoint's folder, so the
launcher, the claim, the run token, the reaper, the logs and the rollout viewer serve it unchanged.
What cannot run is refused here, before anything is made: a deleted checkpoint, and whatever
webapp.experiments.acceptance.accept refuses in the evaluation's config (a split that is not a usable
dataset of the team or does not fit the task, a backend that does not evaluate).

The form's view (reached from the run page's checkpoint list and the experiment page) sits beside the
one service function it calls; the REST API is webapp.experiments.evaluations_api.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from trainer.config import RunConfig, flatten_paths
from trainer.contract import (
    EVAL_ACC,
    EVAL_KEYS,
    EVAL_PASS_AT_1,
    EVAL_PASS_AT_K,
    EVAL_PROMPTS,
    EVAL_REWARD_MEAN,
    POLICY_FOLDER,
)
from webapp.accounts.models import Team
from webapp.experiments.acceptance import MAX_NAME_LENGTH, Refused, accept
from webapp.experiments.access import get_experiment_for_user
from webapp.experiments.models import LAUNCH_KEY, RUN_NAME_MAX, Experiment, Run, RunKind, RunStatus

MAX_K = 64  # samples per prompt
MAX_ROWS = 100_000
MAX_TEMPERATURE = 2.0
SPLIT_PATHS = ("data.train_path", "data.val_path")  # an evaluation's config names its split in both


class EvaluationRefused(ValueError):
    """What makes the evaluation impossible: (field, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(message for _, message in problems))


@dataclass(frozen=True)
class EvaluationSettings:
    dataset: str  # dataset:<id>, a usable dataset of the team
    k: int = 1
    max_rows: int | None = None
    temperature: float = 1.0


def split_choices(experiment: Experiment) -> list[tuple[str, str]]:
    """The datasets an evaluation may score: the experiment's validation and training splits first,
    then the team's other usable datasets that fit its task."""
    from webapp.datasets.models import Dataset

    data = (experiment.config.get("data") or {}) if isinstance(experiment.config, dict) else {}
    own = {data.get("val_path"): "validation split", data.get("train_path"): "training split"}
    choices: list[tuple[str, str]] = []
    others: list[tuple[str, str]] = []
    for dataset in Dataset.offered_to(experiment.team).order_by("-created", "-id"):
        if dataset.task_mismatch(experiment.task) is not None or dataset.holds_demonstrations:
            continue
        role = own.get(dataset.reference)
        label = (
            f"{dataset.name} ({dataset.reference}, the experiment's {role})"
            if role
            else f"{dataset.name} ({dataset.reference})"
        )
        (choices if role else others).append((dataset.reference, label))
    choices.sort(key=lambda choice: own.get(choice[0]) != "validation split")
    return choices + others


def default_split(experiment: Experiment) -> str:
    """The experiment's validation split, else its training split."""
    data = (experiment.config.get("data") or {}) if isinstance(experiment.config, dict) else {}
    return str(data.get("val_path") or data.get("train_path") or "")


def evaluation_config(
    experiment: Experiment, settings: EvaluationSettings, checkpoint: str | None
) -> RunConfig:
    """The experiment's config as an evaluation: the split as its one dataset, k samples, no saving;
    accepted as every config is, else EvaluationRefused."""
    fields = flatten_paths(experiment.config)
    fields.update(
        {
            "evaluation.enabled": True,
            "evaluation.checkpoint": checkpoint,
            "sft.enabled": False,  # an SFT run's checkpoint is evaluated as any model: by its rollouts
            # Both data paths name the split: the trainer reads and downloads data.val_path only.
            "data.train_path": settings.dataset,
            "data.val_path": settings.dataset,
            "data.val_max_samples": settings.max_rows,
            "rollout.n": settings.k,
            "rollout.temperature": settings.temperature,
            "trainer.save_every": 0,
            "trainer.checkpoint_dir": None,
            "trainer.resume": False,
            "trainer.keep_checkpoints": None,
        }
    )
    try:
        return accept(experiment.team, fields, evaluation=True)
    except Refused as refused:
        # Both data paths name the split: one message is enough, on the form's field.
        split = [message for path, message in refused.problems if path in SPLIT_PATHS]
        others = [(path, message) for path, message in refused.problems if path not in SPLIT_PATHS]
        raise EvaluationRefused(([("dataset", split[0])] if split else []) + others) from None


def create_evaluation(
    experiment: Experiment,
    user: Any,
    settings: EvaluationSettings,
    *,
    source: Run | None = None,
    step: int | None = None,
    launch_key: str = "",
) -> Run:
    """A queued evaluation of ``source``'s checkpoint of ``step`` (none: the base model) on the
    split; EvaluationRefused, with nothing made, when it could not run."""
    from webapp.experiments.tasks import launch_run

    team = experiment.team
    if launch_key and LAUNCH_KEY.match(launch_key):
        earlier = experiment.runs.filter(launch_key=launch_key, kind=RunKind.EVALUATION).first()
        if earlier is not None:
            return earlier  # the same form sent twice (a double-click): one evaluation
    folder = _checkpoint_folder(experiment, source, step) if source is not None else None
    config = evaluation_config(experiment, settings, str(folder) if folder else None)
    what = f"{source.name or f'run {source.pk}'} · step {step}" if source is not None else "base model"
    with transaction.atomic():
        run = Run.objects.create(
            experiment=experiment,
            team=team,
            seed=config.trainer.seed,
            executor=config.executor,
            kind=RunKind.EVALUATION,
            evaluated_run=source,
            evaluated_step=step if source else None,
            name=f"eval · {what}"[:RUN_NAME_MAX],
            launch_key=launch_key if LAUNCH_KEY.match(launch_key) else "",
        )
        run.freeze_config(json.loads(config.with_overrides(name=run.name[:MAX_NAME_LENGTH]).to_json()))
        run.enqueue()
        launch_run.delay_on_commit(run.pk)
    return run


def _checkpoint_folder(experiment: Experiment, source: Run, step: int | None) -> Path:
    """The folder of ``source``'s checkpoint of ``step``; EvaluationRefused when there is none to
    evaluate."""
    from webapp.experiments.run_files import checkpoint_folder

    if source.experiment_id != experiment.pk:
        raise EvaluationRefused([("run", f"run {source.pk} is not a run of experiment {experiment.pk}")])
    if step is None:
        raise EvaluationRefused([("step", "a run's checkpoint is named by its step: set step")])
    checkpoint = source.checkpoints.filter(step=step).order_by("-received").first()
    if checkpoint is None:
        raise EvaluationRefused([("step", f"run {source.pk} has no checkpoint of step {step}")])
    if checkpoint.deleted:
        deleted = (
            f"the checkpoint of step {step} was deleted (trainer.keep_checkpoints): evaluate a "
            "checkpoint that is still listed"
        )
        raise EvaluationRefused([("step", deleted)])
    folder = checkpoint_folder(checkpoint)
    if folder is None or not (folder / POLICY_FOLDER).is_dir():
        raise EvaluationRefused([("step", f"the checkpoint of step {step} has no weights on disk any more")])
    return folder


def settings_of(run: Run) -> dict[str, Any]:
    """What an evaluation run scores: its split, k, row limit and temperature (from its frozen config)."""
    config = run.config if isinstance(run.config, dict) else {}
    data, rollout = config.get("data") or {}, config.get("rollout") or {}
    return {
        "dataset": data.get("val_path") or "",
        "k": rollout.get("n"),
        "max_rows": data.get("val_max_samples"),
        "temperature": rollout.get("temperature"),
    }


def evaluated_model(run: Run) -> str:
    if run.evaluated_run_id is None:
        return "base model"
    return f"{run.evaluated_run.name if run.evaluated_run else 'a deleted run'} · step {run.evaluated_step}"


def eval_metrics(run: Run) -> dict[str, float]:
    # Read through the run's relation to the latest values ingestion keeps (docs/architecture.md#layers).
    return dict(run.latest_metrics.filter(key__name__in=EVAL_KEYS).values_list("key__name", "value"))


def dataset_names(references: set[str]) -> dict[str, str]:
    """``dataset:<id>`` → "name (dataset:<id>)" of those that still exist."""
    from webapp.datasets.models import DATASET_REF_PREFIX, Dataset

    ids = [r.removeprefix(DATASET_REF_PREFIX) for r in references if r.startswith(DATASET_REF_PREFIX)]
    found = Dataset.objects.filter(pk__in=[int(i) for i in ids if i.isdigit() and len(i) <= 18])
    return {dataset.reference: f"{dataset.name} ({dataset.reference})" for dataset in found}


def evaluation_summary(run: Run) -> dict[str, Any]:
    """What the run page shows of an evaluation: its settings and, once reported, its eval/... metrics."""
    metrics, settings = eval_metrics(run), settings_of(run)
    return {
        "settings": settings,
        "metrics": metrics,
        "dataset": dataset_names({settings["dataset"]}).get(settings["dataset"], settings["dataset"]),
        "acc": metrics.get(EVAL_ACC),
        "pass_at_1": metrics.get(EVAL_PASS_AT_1),
        "pass_at_k": metrics.get(EVAL_PASS_AT_K),
        "reward_mean": metrics.get(EVAL_REWARD_MEAN),
        "prompts": metrics.get(EVAL_PROMPTS),
        # Kept from its stored batches when it ended early (docs/evaluations.md#a-run-that-ends-early).
        "partial": bool(metrics) and run.is_terminal and run.status != RunStatus.SUCCEEDED,
    }


# -- pages ------------------------------------------------------------------------------------------


class EvaluationForm(forms.Form):
    dataset = forms.ChoiceField(label="Split", help_text="The dataset whose rows are scored.")
    k = forms.IntegerField(
        label="k (samples per prompt)",
        min_value=1,
        max_value=MAX_K,
        initial=4,
        help_text="pass@k and accuracy are computed over these samples.",
    )
    max_rows = forms.IntegerField(
        label="Max rows",
        min_value=1,
        max_value=MAX_ROWS,
        required=False,
        initial=50,
        help_text="Score at most this many rows of the split; empty: all of them.",
    )
    temperature = forms.FloatField(
        label="Temperature",
        min_value=0.0,
        max_value=MAX_TEMPERATURE,
        initial=1.0,
        help_text="0 decodes greedily (then every sample of a prompt is the same answer).",
    )

    def __init__(self, *args: Any, choices: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        typing.cast(forms.ChoiceField, self.fields["dataset"]).choices = choices

    def settings(self) -> EvaluationSettings:
        data = self.cleaned_data
        return EvaluationSettings(data["dataset"], data["k"], data["max_rows"], data["temperature"])


def _source(request: HttpRequest, team: Team, experiment: Experiment) -> tuple[Run | None, int | None]:
    """The run and step the form evaluates (?run=&step=, or the POSTed fields); none: the base model."""
    run_id, step = (
        request.POST.get("run") or request.GET.get("run"),
        request.POST.get("step") or request.GET.get("step"),
    )
    if not run_id or not str(run_id).isdigit() or len(str(run_id)) > 18:
        return None, None
    source = get_object_or_404(Run, pk=int(run_id), team=team, experiment=experiment)
    return source, int(step) if step and str(step).isdigit() and len(str(step)) <= 9 else None


@login_required
def evaluate(request: HttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """GET: the evaluation form (a checkpoint with ?run=&step=, else the base model); POST: queue it."""
    experiment = get_experiment_for_user(request, team_slug, pk, write=True)
    source, step = _source(request, experiment.team, experiment)
    form = EvaluationForm(
        request.POST or None,
        choices=split_choices(experiment),
        initial={"dataset": default_split(experiment)},
    )
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            run = create_evaluation(
                experiment,
                request.user,
                form.settings(),
                source=source,
                step=step,
                launch_key=str(request.POST.get("launch_key", "")),
            )
        except EvaluationRefused as refused:
            for field, message in refused.problems:
                form.add_error(field if field in form.fields else None, message)
            status = 400
        else:
            messages.success(request, f"Evaluation queued: {run.name}.")
            return redirect("run", team_slug=team_slug, pk=run.pk)
    elif request.method == "POST":
        status = 400
    from webapp.experiments.views import new_launch_key

    context = {
        "team": experiment.team,
        "experiment": experiment,
        "form": form,
        "source": source,
        "step": step,
        "launch_key": request.POST.get("launch_key") or new_launch_key(),
    }
    return render(request, "experiments/evaluate.html", context, status=status)
