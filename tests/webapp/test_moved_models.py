"""The models that left the results app for ingestion, monitoring and retention keep their tables and
rows (docs/architecture.md#apps): a database migrated as it was before the move, then migrated
forward, reads what it stored through the new apps' models; and the migrations describe the models
exactly, so `makemigrations` has nothing to write."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from webapp.experiments.models import Experiment, Run
from webapp.ingestion.models import Trajectory
from webapp.monitoring.models import HealthAlert
from webapp.retention.models import RunStorage

# Unapplying the new apps' migrations takes the database back to the state before the move: their
# first migrations only took the tables over, and results' 0012 (which needs them) goes too.
BEFORE_THE_MOVE = [("ingestion", None), ("monitoring", None), ("retention", None)]


def _store_the_old_way(executor: MigrationExecutor, run: Run) -> None:
    """Rows written through the results app's models as they were before the move."""
    old = executor.loader.project_state(("results", "0011_pending_token_signals")).apps
    old.get_model("results", "Trajectory").objects.create(
        run_id=run.pk, uid="u1", group_id="g", sample_index=3, training_step=2, total_reward=1.0, success=True
    )
    old.get_model("results", "HealthAlert").objects.create(
        run_id=run.pk, check_name="kl_blowup", episode=1, step=2, value=9.0, threshold=1.0
    )
    old.get_model("results", "RunStorage").objects.create(run_id=run.pk, retention="sample", kept=1)


def test_rows_stored_before_the_move_are_read_through_the_new_apps_models(personas: Any) -> None:
    team = personas["acme"]
    experiment = Experiment.objects.create(team=team, name="moved", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=team, seed=1, config={})
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_THE_MOVE)
    _store_the_old_way(MigrationExecutor(connection), run)

    forward = MigrationExecutor(connection)
    forward.migrate(forward.loader.graph.leaf_nodes())

    assert Trajectory.objects.get(run=run).uid == "u1"
    assert HealthAlert.objects.get(run=run).check_name == "kl_blowup"
    assert (RunStorage.objects.get(run=run).retention, RunStorage.objects.get(run=run).kept) == ("sample", 1)
    assert run.trajectories.count() == 1 and run.storage.kept == 1


def test_the_migrations_describe_the_models_exactly(db: Any) -> None:
    # --check exits with status 1 when a model differs from what its app's migrations build.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
