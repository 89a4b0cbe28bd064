"""The environment of a launched run: the variables the executors set and the trainer reads."""

from __future__ import annotations

__all__ = [
    "API_ENV",
    "CLAIMANT_ENV",
    "MLFLOW_RUN_ID_ENV",
    "MLFLOW_TRACKING_TOKEN_ENV",
    "MLFLOW_TRACKING_URI_ENV",
    "PROJECT_ENV",
    "RUN_ID_ENV",
    "TOKEN_ENV",
]

TOKEN_ENV = "STUDIO_RUN_TOKEN"  # the run's own API token (never in the frozen config)
API_ENV = "STUDIO_API_URL"  # the web app's base URL, as the trainer reaches it
RUN_ID_ENV = "STUDIO_RUN_ID"  # the run's primary key
PROJECT_ENV = "STUDIO_PROJECT"  # the experiment's name (verl's trainer.project_name)
# MLflow's own variables: verl's Tracking reads them and attaches to the run
# (docs/verl.md#tracking-and-mlflow).
MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
MLFLOW_TRACKING_TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
MLFLOW_RUN_ID_ENV = "MLFLOW_RUN_ID"
# The launch's claimant id: one per start of the run, the same in every process of that start (the
# trainer and, for verl, its Ray workers). The trainer claims the run with it and sends it with every
# call that changes the run; a process of another start is refused (docs/reliability.md#claimant).
CLAIMANT_ENV = "STUDIO_CLAIMANT"
