"""load_plugins() against a real installed distribution: a dist-info folder on sys.path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.plugins import PluginError, load_plugins
from trainer.tools import TOOLS

GROUP = "agent_r1_studio.tasks"


def install_plugin(root: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{entry_points}\n")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("studio_test_recipe", "studio_test_broken"):
        sys.modules.pop(name, None)
    TOOLS.unregister("recipe_tool")


RECIPE = """
from trainer.tools import BaseTool, ToolResult, register_tool

@register_tool
class RecipeTool(BaseTool):
    name = "recipe_tool"

    async def execute(self, args, **ctx):
        return ToolResult(text="from a recipe")
"""


def test_it_imports_each_plugin_once_so_recipes_can_register_tools(plugin_path: Path) -> None:
    install_plugin(
        plugin_path, "studio_test_recipe_dist", "recipe = studio_test_recipe", {"studio_test_recipe": RECIPE}
    )
    assert "recipe" in load_plugins()
    assert TOOLS.get("recipe_tool").name == "recipe_tool"
    # A second import would register "recipe_tool" again and fail; the loader must not do it.
    assert "recipe" not in load_plugins()


def test_it_names_the_plugin_that_failed_to_import(plugin_path: Path) -> None:
    install_plugin(
        plugin_path,
        "studio_test_broken_dist",
        "broken = studio_test_broken",
        {"studio_test_broken": "raise RuntimeError('no data')\n"},
    )
    with pytest.raises(
        PluginError, match=r"plugin 'broken' \(studio_test_broken\) failed to import: no data"
    ):
        load_plugins()


def test_it_reads_the_installed_entry_points_once_while_sys_path_stays_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading them scans every installed distribution: a form and a dataset page asked ten times per
    request, seconds under load (docs/benchmarks.md#pages-under-load)."""
    import trainer.plugins as plugins

    reads: list[str] = []
    real = plugins.entry_points

    def counted(group: str) -> Any:
        reads.append(group)
        return real(group=group)

    monkeypatch.setattr(plugins, "entry_points", counted)
    getattr(plugins, "_scanned", {}).clear()  # what an earlier test read
    for _ in range(3):
        load_plugins()
    assert reads == [GROUP]
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # a folder that may hold a new plugin
    load_plugins()
    assert reads == [GROUP, GROUP]
