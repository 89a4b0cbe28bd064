"""Fixtures shared by the whole suite: the named personas.

alice owns team Acme, bob is a member of Acme, charlie is an outsider with a team of his own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _fresh_metric_key_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    # Metric key ids are cached per process; each test starts from an empty database.
    if "db" not in request.fixturenames and "transactional_db" not in request.fixturenames:
        yield
        return
    from webapp.results.metrics_store import forget_cached_keys

    forget_cached_keys()
    yield
    forget_cached_keys()


@pytest.fixture
def personas(db: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import Role, Team

    users = get_user_model()
    alice = users.objects.create_user("alice", "alice@example.com", PASSWORD)
    bob = users.objects.create_user("bob", "bob@example.com", PASSWORD)
    charlie = users.objects.create_user("charlie", "charlie@example.com", PASSWORD)
    acme = Team.create_with_owner("Acme", alice)
    acme.add_member(bob, Role.MEMBER)
    other = Team.create_with_owner("Other", charlie)
    return {"alice": alice, "bob": bob, "charlie": charlie, "acme": acme, "other": other}
