"""An MLflow-compatible tracking endpoint under /mlflow/: the part of MLflow's REST API 2.0 that the
official client (and so verl's ``trainer.logger=[mlflow]``) uses for experiments and runs.

An MLflow experiment is one of our experiments (``experiment_id == str(pk)``); an MLflow run is one
of our runs (``run_id == Run.mlflow_run_id``). Metrics go through the ingestion API's append-only
store (:mod:`webapp.ingestion.metrics_store`), params and tags into LoggedValue.
"""
