from __future__ import annotations

from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "webapp.retention"
    label = "retention"
