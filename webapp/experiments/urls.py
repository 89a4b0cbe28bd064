"""Team-scoped sweep and demonstrations pages (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.experiments import demonstration_views, sweep_views

urlpatterns = [
    path("sweeps/new/", sweep_views.sweep_new, name="sweep_new"),
    path("sweeps/<int:pk>/cancel/", sweep_views.sweep_cancel, name="sweep_cancel"),
    path("experiments/limit/", sweep_views.run_limit, name="run_limit"),
    path("datasets/<int:pk>/demonstrations/", demonstration_views.generate, name="dataset_demonstrations"),
    path("demonstrations/<int:pk>/", demonstration_views.job, name="demonstrations_job"),
]
