"""The guarded UPDATE every state change of a row goes through.

A state change that two writers may attempt at once (a redelivered task beside the first, two
clicks, the trainer and the reaper) is one conditional UPDATE: it names the state the row must
still be in, and the writer whose UPDATE changed the row is the one that made the change. Each
caller writes the race it prevents beside its call.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q


def guarded_update(instance: models.Model, guard: Q, **changes: Any) -> bool:
    """Set ``changes`` on ``instance``'s row if the row still matches ``guard``; True when this call
    changed it (exactly one row). ``instance`` is reloaded either way, so it shows who won."""
    changed = type(instance)._default_manager.filter(guard, pk=instance.pk).update(**changes)
    instance.refresh_from_db()
    return changed == 1
