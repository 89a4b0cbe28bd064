"""What only MLflow's API knows of our experiments and runs (docs/mlflow.md#lifecycle): which were
deleted through it, experiment tags, the datasets a run logged as inputs, and MLflow 3's logged
models. The rest of the product does not read these: a run deleted through MLflow stays on the
run pages, where the product's own archive and delete apply."""

from __future__ import annotations

from django.db import models

from webapp.experiments.models import Experiment, Run


class DeletedRun(models.Model):
    """A run MLflow's delete_run marked deleted (restore_run removes the row)."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="mlflow_deleted")
    deleted_at = models.DateTimeField(auto_now_add=True)


class DeletedExperiment(models.Model):
    """An experiment MLflow's delete_experiment marked deleted (restore_experiment removes the row)."""

    experiment = models.OneToOneField(
        Experiment, on_delete=models.CASCADE, primary_key=True, related_name="mlflow_deleted"
    )
    deleted_at = models.DateTimeField(auto_now_add=True)


class ExperimentTag(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="mlflow_tags")
    key = models.CharField(max_length=250)
    value = models.TextField()

    class Meta:
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["experiment", "key"], name="one_mlflow_tag_per_key")]


class RunDataset(models.Model):
    """A dataset a run logged with log_inputs: MLflow's Dataset fields and the input's tags."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="mlflow_datasets")
    name = models.CharField(max_length=500)
    digest = models.CharField(max_length=36)
    source_type = models.CharField(max_length=36)
    source = models.TextField()
    schema = models.TextField(blank=True)
    profile = models.TextField(blank=True)
    tags = models.JSONField(default=dict)

    class Meta:
        ordering = ["pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name", "digest"], name="one_mlflow_dataset_per_run")
        ]


class LoggedModel(models.Model):
    """MLflow 3's logged model (what every ``mlflow.<flavour>.log_model`` creates). Its files live
    among its source run's artifacts, under ``logged-models/<model id>/``
    (docs/mlflow.md#logged-models)."""

    model_id = models.CharField(max_length=40, unique=True)
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="mlflow_models")
    source_run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="mlflow_models"
    )
    name = models.CharField(max_length=500)
    model_type = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=32)
    status_message = models.TextField(blank=True)
    params = models.JSONField(default=dict)
    tags = models.JSONField(default=dict)
    # The Metric protos logged with this model's id: [{key, value, timestamp, step, run_id, model_id}].
    metrics = models.JSONField(default=list)
    # The step of log_outputs that named this model an output of its source run; null before.
    output_step = models.BigIntegerField(null=True, blank=True)
    deleted = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created", "-pk"]
