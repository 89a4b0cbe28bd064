from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete


class IngestionConfig(AppConfig):
    name = "webapp.ingestion"
    label = "ingestion"

    def ready(self) -> None:
        from webapp.experiments.models import Run
        from webapp.experiments.signals import run_finished
        from webapp.ingestion.evaluation_scores import keep_partial_scores
        from webapp.ingestion.tasks import runs_deleted

        post_delete.connect(runs_deleted, sender=Run, dispatch_uid="sweep_texts_of_deleted_runs")
        run_finished.connect(keep_partial_scores, dispatch_uid="keep_partial_scores_of_evaluations")
