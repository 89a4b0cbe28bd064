"""Fields many of the web apps' records share: who made a record, when, and when its work finished."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class CreatedRecord(models.Model):
    """A record a member made; lists show the newest first."""

    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-created"]


class WorkRecord(CreatedRecord):
    """A record of work a Celery worker does for a member: ``finished_at`` is set when it ends."""

    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta(CreatedRecord.Meta):
        abstract = True
