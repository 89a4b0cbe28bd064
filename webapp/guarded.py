"""The guarded UPDATE every state change of a row goes through; and the lock that lets one process
at a time do a periodic job that several workers may be handed at once.

A state change that two writers may attempt at once (a redelivered task beside the first, two
clicks, the trainer and the reaper) is one conditional UPDATE: it names the state the row must
still be in, and the writer whose UPDATE changed the row is the one that made the change. Each
caller writes the race it prevents beside its call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from django.db import Error, connection, models
from django.db.models import Q


def guarded_update(instance: models.Model, guard: Q, **changes: Any) -> bool:
    """Set ``changes`` on ``instance``'s row if the row still matches ``guard``; True when this call
    changed it (exactly one row). ``instance`` is reloaded either way, so it shows who won."""
    changed = type(instance)._default_manager.filter(guard, pk=instance.pk).update(**changes)
    instance.refresh_from_db()
    return changed == 1


@contextlib.contextmanager
def one_at_a_time(lock_key: int) -> Iterator[bool]:
    """Hold Postgres's session advisory lock ``lock_key`` for the block when no one else holds it:
    yields True then, False (without waiting) when another process, on any host using the same
    database, holds it. The lock goes with its connection, so a killed holder leaves it free."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            # A connection lost meanwhile (Postgres restarted) took the lock with it.
            with contextlib.suppress(Error), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key])
