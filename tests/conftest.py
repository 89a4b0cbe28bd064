"""Fixtures shared by the whole suite: the named personas.

alice owns team Acme, bob is a member of Acme, charlie is an outsider with a team of his own.
"""

from __future__ import annotations

from typing import Any

import pytest

PASSWORD = "correct horse battery staple"


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
