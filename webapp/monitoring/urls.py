"""Team-scoped pages of the health checks (included under /t/<team_slug>/ beside the project's own)."""

from __future__ import annotations

from django.urls import path

from webapp.monitoring import views

urlpatterns = [
    path("runs/<int:run_id>/time.json", views.run_time, name="run_time"),
    path("health/", views.health_settings, name="health_settings"),
    path("notifications/", views.notifications, name="notifications"),
]
