"""Demonstrations of a dataset, the dataset side (docs/demonstrations.md): which recipe tools its
rules call, which tools may run them, and the generated conversations adopted as a new dataset
derived from the source. The job that generates them is webapp.experiments.demonstrations.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tasks_lib import demonstrations
from trainer.tools import TOOLS
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.tools.models import TeamTool, builtin_tools


class DemonstrationsRefused(ValueError):
    """A request the generator cannot take (the dataset, the tool map); shown to the user."""


# The rows the form reads to learn which tools the rules call: a dataset's tasks show in its first rows.
HEAD_ROWS = 200


def source_rows(dataset: Dataset) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(dataset.path).to_pylist()
    return rows


def recipe_tools(dataset: Dataset) -> list[str]:
    """The recipe tools the dataset's rules call: what the form offers to replace."""
    if not dataset.is_usable or "prompt" not in pq.read_schema(dataset.path).names:
        return []
    head = next(pq.ParquetFile(dataset.path).iter_batches(batch_size=HEAD_ROWS), None)
    return demonstrations.recipe_tools(head.to_pylist() if head is not None else [])


def tool_options(dataset: Dataset) -> list[str]:
    """Tools that may run a recipe tool's calls: the built-in ones and the team's that are ready."""
    builtin_tools()
    team = TeamTool.objects.filter(team=dataset.team).order_by("name")
    return sorted(TOOLS.names()) + [tool.name for tool in team if tool.is_ready]


def check_tool_map(dataset: Dataset, tool_map: Mapping[str, str]) -> dict[str, str]:
    """The map, with identity entries dropped; DemonstrationsRefused names what is wrong."""
    wanted = recipe_tools(dataset)
    if not wanted:
        raise DemonstrationsRefused(
            "no row of this dataset has a recipe rule for demonstrations (arithmetic, lookup, hotpotqa)"
        )
    offered = set(tool_options(dataset))
    for recipe_tool, tool in tool_map.items():
        if recipe_tool not in wanted:
            raise DemonstrationsRefused(f"{recipe_tool!r} is not a tool the rules call ({', '.join(wanted)})")
        if tool not in offered:
            raise DemonstrationsRefused(f"{tool!r} is neither a built-in tool nor a ready tool of the team")
    return {recipe: tool for recipe, tool in tool_map.items() if recipe != tool}


def adopt(source: Dataset, outcome: demonstrations.Outcome, user: Any) -> Dataset:
    """The conversations as a valid dataset of the team, derived from ``source``."""
    with tempfile.TemporaryDirectory(dir=files.incoming_dir()) as out:
        path = demonstrations.write(outcome, Path(out) / "demonstrations.parquet")
        dataset, _ = Dataset.from_file(
            source.team,
            path,
            sha256=files.sha256_of(path),
            name=f"{source.name} — demonstrations",
            source=f"demonstrations generated from dataset {source.pk} ({source.name})",
            user=user,
            validate_later=False,
        )
    Dataset.objects.filter(pk=dataset.pk, derived_from__isnull=True).update(derived_from=source)
    dataset.settle_checked({"rows": len(outcome.conversations), "layout": "messages"})
    dataset.refresh_from_db()
    return dataset


def form_choices(dataset: Dataset) -> list[tuple[str, list[str]]]:
    """Each recipe tool the rules call, with the tools that may run its calls (itself first)."""
    wanted = recipe_tools(dataset)
    options = tool_options(dataset) if wanted else []
    return [(tool, [tool, *(o for o in options if o != tool)]) for tool in wanted]
