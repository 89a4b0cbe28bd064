"""Team-scoped pages of the rollout viewer (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.rollouts import review_views, views

urlpatterns = [
    path("runs/<int:run_id>/rollouts/", views.rollouts, name="rollouts"),
    path("runs/<int:run_id>/histograms/", views.run_histograms, name="run_histograms"),
    path("runs/<int:run_id>/rollouts/at/<int:step>/", views.rollouts_at, name="rollouts_at"),
    path("runs/<int:run_id>/rollouts/<int:pk>/", views.trajectory, name="trajectory"),
    path("runs/<int:run_id>/groups/<str:group_id>/", views.group, name="rollout_group"),
    path("runs/<int:run_id>/prompts/<int:sample>/compare/", views.prompt_compare, name="prompt_compare"),
    path("runs/prompts/compare/", views.prompt_compare_runs, name="prompt_compare_runs"),
    path("search/", views.search, name="search"),
    path("runs/<int:run_id>/rollouts/<int:pk>/annotate/", review_views.annotate, name="trajectory_annotate"),
    path("runs/<int:run_id>/rollouts/queue/", review_views.queue_new, name="review_queue_new"),
    path("runs/<int:run_id>/rollouts/dataset/", review_views.rollouts_dataset, name="rollouts_dataset"),
    path("labels/", review_views.labels, name="labels"),
    path("queues/", review_views.queue_list, name="review_queues"),
    path("queues/<int:pk>/", review_views.queue_detail, name="review_queue"),
    path("queues/<int:pk>/next/", review_views.queue_next, name="review_queue_next"),
    path("queues/<int:pk>/dataset/", review_views.queue_dataset, name="review_queue_dataset"),
]
