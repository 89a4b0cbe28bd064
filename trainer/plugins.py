"""Recipe plugins: packages that add tools, envs, flows and rewards to the trainer's registries.

A package declares a module in the ``agent_r1_studio.tasks`` entry-point group; importing that
module registers its entries (``@register_tool``, ``REWARDS.add(...)``). This is how
``tasks_lib`` reaches the trainer without the trainer importing it.
"""

from __future__ import annotations

import logging
import sys
import threading
from importlib.metadata import EntryPoint, entry_points

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "agent_r1_studio.tasks"

_lock = threading.Lock()
_loaded: set[tuple[str, str]] = set()
# The group's entry points by the sys.path they were read under. Reading them scans every installed
# distribution's metadata (~15 ms idle, seconds on a loaded machine), and the web app asks on every
# form and dataset page (docs/benchmarks.md#pages-under-load); a changed sys.path (a plugin folder
# added) reads them again.
_scanned: dict[tuple[str, tuple[str, ...]], list[EntryPoint]] = {}


def _entry_points(group: str) -> list[EntryPoint]:
    key = (group, tuple(sys.path))
    if key not in _scanned:
        _scanned.clear()
        _scanned[key] = sorted(entry_points(group=group), key=lambda ep: (ep.name, ep.value))
    return _scanned[key]


class PluginError(ImportError):
    """A plugin's module failed to import."""


def load_plugins(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Import every entry point of ``group`` not yet imported; return the names imported by this call.

    Safe to call more than once: a second import would register the same names again, which the
    registries refuse.
    """
    imported: list[str] = []
    with _lock:
        for entry_point in _entry_points(group):
            key = (entry_point.name, entry_point.value)
            if key in _loaded:
                continue
            try:
                entry_point.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin {entry_point.name!r} ({entry_point.value}) failed to import: {exc}"
                ) from exc
            _loaded.add(key)
            imported.append(entry_point.name)
            logger.info("loaded plugin %s (%s)", entry_point.name, entry_point.value)
    return imported
