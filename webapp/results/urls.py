"""Team-scoped pages of the results app (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.results import (
    checkpoints,
    export_views,
    import_views,
    registry_views,
    run_page,
    sweep_page,
    views,
)

urlpatterns = [
    path("runs/", views.runs, name="runs"),
    path("runs/columns/", views.runs_columns, name="runs_columns"),
    path("runs/actions/", views.runs_action, name="runs_action"),
    path("runs/delete/", views.runs_delete, name="runs_delete"),
    path("runs/compare/", views.runs_compare, name="runs_compare"),
    path("runs/import/", import_views.import_run, name="run_import"),
    path("runs/import/<int:pk>/", import_views.import_job, name="import_job"),
    path("dashboard/running/", views.dashboard_running, name="dashboard_running"),
    path("compare/export.<str:fmt>", views.compare_export, name="compare_export"),
    path("compare/cell/", views.compare_cell, name="compare_cell"),
    path("curves/", views.curves, name="curves"),
    path("curves.json", views.curves_data, name="curves_data"),
    path("curves.csv", views.curves_csv, name="curves_csv"),
    path("curves/layout/", views.curves_layout, name="curves_layout"),
    path("experiments/<int:experiment_id>/curves/", views.experiment_curves, name="experiment_curves"),
    path("runs/<int:run_id>/curves/", views.run_curves, name="run_curves"),
    path("runs/<int:run_id>/tools/", views.tools, name="run_tools"),
    path("runs/<int:run_id>/prompts/", views.prompts, name="run_prompts"),
    path(
        "runs/<int:run_id>/checkpoints/<int:step>/download/", checkpoints.download, name="checkpoint_download"
    ),
    path("runs/<int:run_id>/checkpoints/<int:step>/export/", export_views.export_start, name="export_start"),
    path("exports/<int:pk>/", export_views.export_job, name="export_job"),
    path("exports/<int:pk>/download/", export_views.export_download, name="export_download"),
    path("runs/<int:run_id>/retention/", run_page.run_retention, name="run_retention"),
    path("sweeps/<int:pk>/", sweep_page.sweep_detail, name="sweep"),
    path("checkpoints/", registry_views.registry, name="checkpoint_registry"),
    path("checkpoints/<int:pk>/tags/", registry_views.checkpoint_tags, name="checkpoint_tags"),
]
