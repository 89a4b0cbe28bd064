"""Mounted at /mlflow/: MLFLOW_TRACKING_URI=<server>/mlflow (the user's first team) or
<server>/mlflow/t/<team> (a chosen team, for people in several)."""

from __future__ import annotations

from django.urls import path, re_path

from webapp.mlflow_api import artifacts, links, trace_reads, views
from webapp.mlflow_api.plumbing import reads_body

# Every view reads the request body before it answers (docs/mlflow.md#calls-not-served).
urlpatterns = [
    # Where the links the MLflow client prints land (MLflow's UI is not served here).
    path("", reads_body(links.browse), name="mlflow_browse"),
    path("open/", reads_body(links.open_link), name="mlflow_open"),
    path("api/2.0/mlflow/<path:path>", reads_body(views.endpoint)),
    path("t/<slug:team_slug>/api/2.0/mlflow/<path:path>", reads_body(views.endpoint)),
    # Traces (docs/mlflow.md#traces): logging them (their spans arrive through the artifact
    # service), reading them back.
    path("api/3.0/mlflow/<path:path>", reads_body(trace_reads.endpoint)),
    path("t/<slug:team_slug>/api/3.0/mlflow/<path:path>", reads_body(trace_reads.endpoint)),
    # The artifact service (docs/mlflow.md#artifacts): a folder's listing, then one file.
    path("api/2.0/mlflow-artifacts/artifacts", reads_body(artifacts.artifacts)),
    path("api/2.0/mlflow-artifacts/artifacts/<path:path>", reads_body(artifacts.artifacts)),
    path("t/<slug:team_slug>/api/2.0/mlflow-artifacts/artifacts", reads_body(artifacts.artifacts)),
    path(
        "t/<slug:team_slug>/api/2.0/mlflow-artifacts/artifacts/<path:path>", reads_body(artifacts.artifacts)
    ),
    re_path(r"^", reads_body(views.unknown)),
]
