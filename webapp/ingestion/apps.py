from __future__ import annotations

from django.apps import AppConfig


class IngestionConfig(AppConfig):
    name = "webapp.ingestion"
    label = "ingestion"
