from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from webapp.datasets.models import Dataset


def dataset_from_recipe(team: Any, task: str, tmp_path: Path) -> dict[str, Dataset]:
    """Prepare a built-in recipe's fixtures and adopt each split as a validated dataset of ``team``."""
    from tasks_lib.registry import TASKS, PrepareOptions, load_recipes

    load_recipes()
    written = TASKS.get(task).prepare(None, tmp_path / task, PrepareOptions())
    datasets = {}
    for split, path in written.items():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        dataset, _ = Dataset.from_file(team, path, sha256=digest, name=f"{task} {split}", source=f"recipe:{task}",
                                       validate_later=False)  # fmt: skip
        dataset.validate()
        assert dataset.is_usable, dataset.problems
        datasets[split] = dataset
    return datasets


@pytest.fixture
def arithmetic(personas: Any, tmp_path: Path) -> dict[str, Dataset]:
    return dataset_from_recipe(personas["acme"], "arithmetic", tmp_path)


@pytest.fixture
def launch_env(live_server: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The worker (a separate process) and the trainer reach this test's live server."""
    monkeypatch.setenv("STUDIO_PUBLIC_URL", live_server.url)
    settings.PUBLIC_URL = live_server.url
    return live_server
