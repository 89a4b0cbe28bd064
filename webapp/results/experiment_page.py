"""An experiment's page: its config (and what changed from the experiment it was cloned from), its
runs in the runs table and the comparison of its evaluations (docs/evaluations.md#comparing)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse

from trainer.config import diff
from webapp.experiments.access import get_experiment_for_user
from webapp.experiments.views import new_launch_key, stored_config
from webapp.htmx import HtmxHttpRequest
from webapp.results.checkpoint_registry import RegistryQuery, totals
from webapp.results.eval_table import evaluation_table
from webapp.results.views import render_runs_table
from webapp.retention.checkpoint_policy import KeepPolicy


@login_required
def detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    experiment = get_experiment_for_user(request, team_slug, pk)
    config, config_yaml, config_problem = stored_config(experiment.config)
    changes = None
    if experiment.cloned_from is not None and config is not None:
        source = stored_config(experiment.cloned_from.config)[0]
        changes = diff(source, config) if source is not None else None
    context = {
        "experiment": experiment,
        "config_yaml": config_yaml,
        "config_problem": config_problem,
        "changes": changes,
        "launch_key": new_launch_key(),
        "evaluations": evaluation_table(experiment),
        # Which checkpoints its runs keep and what deleting the others saved (docs/checkpoints.md#keep-policies).
        "keep_policy": KeepPolicy.of_experiment(experiment.pk),
        "checkpoints": totals(experiment.team, RegistryQuery(experiment=experiment.pk)),
    }
    return render_runs_table(request, experiment.team, experiment, "experiments/detail.html", context)
