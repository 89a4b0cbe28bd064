"""A run's storage row: its retention policy and what its trajectories take (docs/rollouts.md#storage).

Ingestion counts each batch's bytes in its own transaction (:func:`count_batch`, measured by
webapp.ingestion.storage.batch_sizes), so a run's page and its team's page read a row, not the
tables. A run's row is made, with its experiment's policy, by the run's first batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import F, Sum
from django.utils import timezone

from webapp.accounts.models import Team
from webapp.retention.models import ExperimentRetention, RunStorage
from webapp.retention.policy import Retention

if TYPE_CHECKING:  # retention sits below experiments (docs/architecture.md#layers)
    from webapp.experiments.models import Run

LARGEST_RUNS = 5


@dataclass
class Sizes:
    trajectory_bytes: int = 0
    step_bytes: int = 0
    token_signal_bytes: int = 0
    tool_call_bytes: int = 0
    text_bytes: int = 0

    def of_rows(self) -> dict[str, int]:
        """The bytes of the run's own rows, by counter name (texts are counted apart: runs share them)."""
        return {name: value for name, value in asdict(self).items() if name != "text_bytes"}

    def added(self) -> dict[str, Any]:
        """UPDATE values that add these sizes to a storage row's counters."""
        return {name: F(name) + value for name, value in asdict(self).items()}


def storage_row(run: Run) -> RunStorage:
    """The run's storage row, locked until the transaction ends (ingestion and a retention change of
    one run take turns on it); made with the experiment's policy if the run has none yet."""
    found = RunStorage.objects.select_for_update().filter(pk=run.pk).first()
    if found is not None:
        return found
    chosen = ExperimentRetention.objects.filter(experiment_id=run.experiment_id).first()
    fields = Retention.of(chosen).fields() if chosen is not None else {}
    # Race: the run's first two batches at once; one insert wins, the other reads it back.
    RunStorage.objects.bulk_create([RunStorage(run=run, **fields)], ignore_conflicts=True)
    return RunStorage.objects.select_for_update().get(pk=run.pk)


def storage_of(run: Run) -> RunStorage:
    """The run's storage row as it stands, unsaved and empty for a run that has stored nothing."""
    found = RunStorage.objects.filter(pk=run.pk).first()
    if found is not None:
        return found
    chosen = ExperimentRetention.objects.filter(experiment_id=run.experiment_id).first()
    return RunStorage(run=run, **(Retention.of(chosen).fields() if chosen is not None else {}))


def count_batch(storage: RunStorage, received: int, kept: int, sizes: Sizes) -> None:
    """Add one batch to the run's counters (the caller holds the row: storage_row)."""
    RunStorage.objects.filter(pk=storage.pk).update(
        received=F("received") + received,
        kept=F("kept") + kept,
        **sizes.added(),
    )


def set_policy(run: Run, retention: Retention) -> RunStorage:
    """Set the run's policy on its row (inside the caller's transaction); what the policy drops of
    the stored data is webapp.ingestion.storage.apply_retention's."""
    storage = storage_row(run)
    for name, value in retention.fields().items():
        setattr(storage, name, value)
    storage.changed_at = timezone.now()
    storage.save()
    return storage


# -- the team's page --------------------------------------------------------------------------------

TOTAL = (
    F("trajectory_bytes") + F("step_bytes") + F("token_signal_bytes") + F("tool_call_bytes") + F("text_bytes")
)


@dataclass
class RunStorageView:
    storage: RunStorage
    policy: str  # in words
    form: Any  # a RetentionForm with the run's policy


@dataclass
class TeamStorage:
    total_bytes: int
    runs: int
    largest: Sequence[RunStorage]


def team_storage(team: Team) -> TeamStorage:
    rows = RunStorage.objects.filter(run__team=team)
    total = rows.aggregate(total=Sum(TOTAL))["total"] or 0
    largest = list(
        rows.annotate(total=TOTAL).select_related("run").order_by("-total", "run_id")[:LARGEST_RUNS]
    )
    return TeamStorage(int(total), rows.count(), largest)
