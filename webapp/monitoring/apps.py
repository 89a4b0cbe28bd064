from __future__ import annotations

from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "webapp.monitoring"
    label = "monitoring"

    def ready(self) -> None:
        from webapp.ingestion.signals import metrics_stored
        from webapp.monitoring.health import judge_batch

        metrics_stored.connect(judge_batch, dispatch_uid="health_checks_judge_each_metric_batch")
