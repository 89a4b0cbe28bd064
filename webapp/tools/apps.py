from __future__ import annotations

from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "webapp.tools"
    label = "tools"
