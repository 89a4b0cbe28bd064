"""The lookup task's key → value table: generated from a seed, so the service and the data agree
without shipping a file (docs/recipes.md#lookup)."""

from __future__ import annotations

import functools
import random

TABLE_SIZE = 1000
_WORDS = (
    "amber", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
    "kestrel", "lumen", "maple", "nimbus", "onyx", "pebble", "quartz", "raven", "sable", "tundra",
)  # fmt: skip


@functools.cache
def table(seed: int) -> dict[str, str]:
    """``TABLE_SIZE`` keys such as ``maple-417``, each with a six-digit value; the same for a seed."""
    rng = random.Random(f"lookup-table-{seed}")
    entries: dict[str, str] = {}
    while len(entries) < TABLE_SIZE:
        key = f"{rng.choice(_WORDS)}-{rng.randrange(1000):03d}"
        entries.setdefault(key, str(rng.randrange(100_000, 1_000_000)))
    return entries
