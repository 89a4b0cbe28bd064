"""What the experiments app tells the apps below it, which cannot import it: a run's token was issued
(accounts counts only unknown tokens as guesses) and a dataset is named by an experiment or a run
(datasets refuses to delete it). Registered from ExperimentsConfig.ready() (docs/architecture.md#layers)."""

from __future__ import annotations

from django.db.models import Q

from webapp.accounts.throttle import register_issued_tokens
from webapp.datasets.models import Dataset, register_dataset_use
from webapp.experiments.models import Experiment, Run
from webapp.experiments.run_auth import run_token_issued


def dataset_is_named(dataset: Dataset) -> bool:
    """Whether an experiment or run of the dataset's team names it (their configs hold ``dataset:<id>``)."""
    names = Q(config__data__train_path=dataset.reference) | Q(config__data__val_path=dataset.reference)
    return (
        Run.objects.filter(names, team=dataset.team).exists()
        or Experiment.objects.filter(names, team=dataset.team).exists()
    )


def register() -> None:
    register_issued_tokens(run_token_issued)
    register_dataset_use(dataset_is_named)
