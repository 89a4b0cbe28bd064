"""Fixtures for the task recipe tests: recipes prepared from their fixtures (SmolLM2's tokenizer,
``smol_tokenizer``, is tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import PrepareOptions, load_recipes


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Path]]:
    """prepared(task, fixtures=True, **options) -> {split: parquet}; each combination is prepared once."""
    load_recipes()
    cache: dict[tuple[Any, ...], dict[str, Path]] = {}

    def prepare(
        task: str, *, fixtures: bool = True, source: Path | None = None, **options: Any
    ) -> dict[str, Path]:
        key = (task, fixtures, str(source), tuple(sorted(options.items())))
        if key not in cache:
            recipe = load_recipes().get(task)
            output = tmp_path_factory.mktemp(f"prepared-{task}")
            origin = source if source is not None else (recipe.fixtures if fixtures else None)
            cache[key] = recipe.prepare(origin, output, PrepareOptions(**options))
        return cache[key]

    return prepare
