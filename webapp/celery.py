"""The Celery app. Tasks live beside their models in each app's ``tasks.py``."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from django.db import transaction

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

app = Celery("webapp")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def enqueue_on_commit(task_name: str, *args: Any) -> None:
    """``task.delay_on_commit(*args)`` for the task declared with ``name=task_name``. For the module a
    task imports (the model it loads): importing the task back would close a cycle
    (docs/architecture.md#layers), so that module names the task by a constant it holds."""
    transaction.on_commit(lambda: app.signature(task_name, args=args).delay())
