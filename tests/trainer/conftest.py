"""Shared fixtures for trainer tests. Trainer tests never touch Django or the database; SmolLM2's
tokenizer (``smol_tokenizer``) is tests/conftest.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from trainer.registry import Registry


@pytest.fixture
def temp_register() -> Iterator[Callable[[Registry[Any], str, Any], Any]]:
    """Register throwaway entries (tools, envs, rewards) for one test; they are removed afterwards."""
    added: list[tuple[Registry[Any], str]] = []

    def register(registry: Registry[Any], name: str, entry: Any) -> Any:
        registry.add(name, entry)
        added.append((registry, name))
        return entry

    yield register
    for registry, name in added:
        registry.unregister(name)
