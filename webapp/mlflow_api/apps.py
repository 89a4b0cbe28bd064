from __future__ import annotations

from django.apps import AppConfig


class MlflowApiConfig(AppConfig):
    name = "webapp.mlflow_api"
    label = "mlflow_api"
    verbose_name = "MLflow-compatible tracking endpoint"
