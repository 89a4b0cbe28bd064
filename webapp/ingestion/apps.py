from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete


class IngestionConfig(AppConfig):
    name = "webapp.ingestion"
    label = "ingestion"

    def ready(self) -> None:
        from webapp.experiments.models import Run
        from webapp.ingestion.tasks import runs_deleted

        post_delete.connect(runs_deleted, sender=Run, dispatch_uid="sweep_texts_of_deleted_runs")
