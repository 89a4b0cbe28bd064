"""Team-scoped sweep pages (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.experiments import sweep_views

urlpatterns = [
    path("sweeps/new/", sweep_views.sweep_new, name="sweep_new"),
    path("sweeps/<int:pk>/cancel/", sweep_views.sweep_cancel, name="sweep_cancel"),
    path("experiments/limit/", sweep_views.run_limit, name="run_limit"),
]
