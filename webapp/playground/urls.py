"""The playground's pages (included under /t/<team_slug>/)."""

from __future__ import annotations

from django.urls import path

from webapp.playground import views

urlpatterns = [
    path("playground/", views.playground, name="playground"),
    path("playground/<int:pk>/", views.session, name="playground_session"),
]
