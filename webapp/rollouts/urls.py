"""Team-scoped pages of the rollout viewer (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.rollouts import views

urlpatterns = [
    path("runs/<int:run_id>/rollouts/", views.rollouts, name="rollouts"),
    path("runs/<int:run_id>/histograms/", views.run_histograms, name="run_histograms"),
    path("runs/<int:run_id>/rollouts/at/<int:step>/", views.rollouts_at, name="rollouts_at"),
    path("runs/<int:run_id>/rollouts/<int:pk>/", views.trajectory, name="trajectory"),
    path("runs/<int:run_id>/groups/<str:group_id>/", views.group, name="rollout_group"),
    path("runs/<int:run_id>/prompts/<int:sample>/compare/", views.prompt_compare, name="prompt_compare"),
    path("runs/prompts/compare/", views.prompt_compare_runs, name="prompt_compare_runs"),
    path("search/", views.search, name="search"),
]
